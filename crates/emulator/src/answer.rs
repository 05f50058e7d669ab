//! What each SCP command does to a board and what it answers: sver, read, write, fill,
//! iptag TTO and, on a machine, `CMD_INFO` and reads of the system variables and the
//! router's P2P table, which SpiNNMan's discovery asks for. Those two are made from the
//! machine's geometry when read and cannot be written (`RC_ARG`).

use volley_proto::scp::machine::{
    ChipInfo, Geometry, INFO_LEN, P2P_TABLE_BASE, P2P_TABLE_LEN, SV_BASE, SV_LEN,
};
use volley_proto::scp::sdp::Address;
use volley_proto::scp::{
    self, Command, DataType, RequestRepr, ReturnCode, TtoInfo, Version, VersionInfo,
};

use crate::SDRAM_BASE;
use crate::memory::Refused;
use crate::state::State;

/// SDRAM a fresh SpiNN-5 chip reports free to `CMD_INFO` (SpiNNMachine's
/// `max_sdram_per_chip` for the board): the rest of its 128 MiB holds SC&MP's own.
const FREE_SDRAM: u32 = 123_469_792;

/// Runs one parsed request against the state of the board chip `chip` is on (whose
/// Ethernet address is `ip`, in a machine of `geometry` if it is one); returns the return
/// code and the reply body written into `body`.
pub(crate) fn execute(
    geometry: Option<Geometry>,
    ip: [u8; 4],
    state: &mut State,
    request: &RequestRepr<'_>,
    chip: Address,
    body: &mut [u8],
) -> (ReturnCode, usize) {
    match request.cmd {
        Command::SVER => {
            let info = VersionInfo {
                core: chip,
                phys_cpu: chip.cpu,
                buffer_size: scp::MAX_DATA_LEN as u16,
                build_date: 0,
                name: "SC&MP/SpiNNaker",
                version: Version::Semantic {
                    major: 4,
                    minor: 0,
                    patch: 0,
                },
            };
            match info.emit(body) {
                Ok(n) => (ReturnCode::OK, n),
                Err(_) => (ReturnCode::BUF, 0),
            }
        }
        Command::READ => match request.transfer_args() {
            Ok((address, len, ty)) if aligned(address, len, ty) => {
                let out = &mut body[..len];
                let read = match machine_region(geometry, ip, chip, address, out) {
                    Some(read) => read,
                    None => state.memory.read(chip.x, chip.y, address, out),
                };
                match read {
                    Ok(()) => (ReturnCode::OK, len),
                    Err(refused) => (refused.code(), 0),
                }
            }
            _ => (ReturnCode::ARG, 0),
        },
        Command::WRITE => match request.transfer_args() {
            Ok((address, len, ty)) if aligned(address, len, ty) && len == request.data.len() => {
                match state.memory.write(chip.x, chip.y, address, request.data) {
                    Ok(()) => (ReturnCode::OK, 0),
                    Err(refused) => (refused.code(), 0),
                }
            }
            _ => (ReturnCode::ARG, 0),
        },
        Command::FILL => {
            let [address, value, len] = request.args;
            if address % 4 != 0 || len % 4 != 0 {
                return (ReturnCode::ARG, 0);
            }
            match state.memory.fill(chip.x, chip.y, address, value, len) {
                Ok(()) => (ReturnCode::OK, 0),
                Err(refused) => (refused.code(), 0),
            }
        }
        Command::IPTAG if request.args[0] >> 16 == scp::IPTAG_TTO => {
            let info = TtoInfo {
                fixed_tags: 8,
                pool_size: state.tags.len() as u8,
                record_size: 32,
                tto: state.tto,
            };
            // 0..=15 sets the timeout; anything larger only queries it.
            if let code @ 0..=15 = request.args[1] {
                state.tto = code as u8;
            }
            let out = info.to_body();
            body[..4].copy_from_slice(&out);
            (ReturnCode::OK, 4)
        }
        Command::IPTAG => (ReturnCode::ARG, 0),
        Command::INFO => match geometry {
            Some(geometry) => match ChipInfo::of(&geometry, chip.x, chip.y, ip, FREE_SDRAM) {
                Some(info) => {
                    body[..INFO_LEN].copy_from_slice(&info.emit());
                    (ReturnCode::OK, INFO_LEN)
                }
                None => (ReturnCode::ROUTE, 0),
            },
            None => (ReturnCode::CMD, 0),
        },
        _ => (ReturnCode::CMD, 0),
    }
}

/// SC&MP moves words and halfwords only at matching alignment.
fn aligned(address: u32, len: usize, ty: DataType) -> bool {
    let unit = match ty {
        DataType::Byte => 1,
        DataType::Short => 2,
        DataType::Word => 4,
    };
    address % unit == 0 && len % unit as usize == 0
}

/// On a machine (or one SpiNN-5 board), a read of the system variables or the P2P table: fills `out` and says
/// whether it lay inside (`None`: not one of these regions, or not a machine).
fn machine_region(
    geometry: Option<Geometry>,
    ip: [u8; 4],
    chip: Address,
    address: u32,
    out: &mut [u8],
) -> Option<Result<(), Refused>> {
    let geometry = geometry?;
    let start = u64::from(address);
    let end = start + out.len() as u64;
    let inside = |base: u32, len: u64| start >= u64::from(base) && end <= u64::from(base) + len;
    if inside(SV_BASE, SV_LEN as u64) {
        let sv = geometry.system_variables(chip.x, chip.y, ip, SDRAM_BASE)?;
        let at = (address - SV_BASE) as usize;
        out.copy_from_slice(&sv[at..at + out.len()]);
        return Some(Ok(()));
    }
    if inside(P2P_TABLE_BASE, u64::from(P2P_TABLE_LEN)) {
        // Each word once, however many of its bytes the read takes.
        let first = address - P2P_TABLE_BASE;
        let mut word = (u32::MAX, [0u8; 4]);
        for (i, byte) in out.iter_mut().enumerate() {
            let offset = first + i as u32;
            if word.0 != offset / 4 {
                word = (
                    offset / 4,
                    geometry
                        .p2p_word((chip.x, chip.y), offset / 4)
                        .to_le_bytes(),
                );
            }
            *byte = word.1[(offset % 4) as usize];
        }
        return Some(Ok(()));
    }
    let overlaps = |base: u32, len: u64| start < u64::from(base) + len && end > u64::from(base);
    if overlaps(SV_BASE, SV_LEN as u64) || overlaps(P2P_TABLE_BASE, u64::from(P2P_TABLE_LEN)) {
        return Some(Err(Refused::Outside));
    }
    None
}
