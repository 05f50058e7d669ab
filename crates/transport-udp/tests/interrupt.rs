//! Transfers interrupted at many points (their futures dropped, as a timeout, a
//! `select!` or Ctrl-C in Python drops them) leave the client ready: the next calls get
//! their own replies, checked byte for byte, never a reply to the abandoned transfer.
//! Reads and writes, one board over UDP and TCP, and a machine of three boards.

use core::net::{Ipv4Addr, SocketAddr};
use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;
use volley_emulator::{BoardConfig, EmulatedMachine as Emulated, MachineConfig, SDRAM_BASE};
use volley_proto::scp::sdp::Address;
use volley_testkit::within;
use volley_transport_udp::{Machine, Op, ScpClient, ScpConfig};

/// The abandoned transfer's region, and three others the next calls use.
const BIG: u32 = SDRAM_BASE + (16 << 20);
const BIG_LEN: usize = 8 << 20;
const SMALL: u32 = SDRAM_BASE + 0x100;

/// Where each interrupted transfer is cut: after this many bytes have completed.
const CUTS: [u64; 6] = [0, 256, 4096, 65_536, 1 << 20, 6 << 20];

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    volley_testkit::pattern(len, u64::from(seed))
}

/// Runs `ops` on `client` until `cut` bytes have completed, then drops the transfer
/// (at 0: after its first poll). Returns whether it was cut (rather than finished).
async fn interrupted(client: &mut ScpClient, ops: &mut [Op<'_>], cut: u64) -> bool {
    let done = Arc::new(AtomicU64::new(0));
    let reached = Arc::new(Notify::new());
    let (d, r) = (done.clone(), reached.clone());
    let transfer = client.execute_with_progress(ops, move |bytes| {
        d.store(bytes, Ordering::SeqCst);
        if bytes >= cut {
            r.notify_one();
        }
    });
    if cut == 0 {
        let mut transfer = core::pin::pin!(transfer);
        return futures::poll!(transfer.as_mut()).is_pending();
    }
    tokio::select! {
        biased;
        () = reached.notified() => true,
        result = transfer => {
            result.unwrap();
            false
        }
    }
}

/// What the next calls must see after each cut: their own bytes, from regions the
/// abandoned transfer never touched.
async fn next_calls_are_their_own(client: &mut ScpClient, small: &[u8], round: u32) {
    let chip = Address::core(0, 0, 0);
    let mut four = [0u8; 4];
    client.read(chip, SMALL, &mut four).await.unwrap();
    assert_eq!(&four, &small[..4], "round {round}: the 4-byte read");
    let back = client.read_bytes(chip, SMALL, small.len()).await.unwrap();
    assert!(back == small, "round {round}: the 64 KiB read differs");
    let fresh = pattern(100_000, 1000 + round);
    let at = SMALL + 0x20_0000;
    client.write(chip, at, &fresh).await.unwrap();
    let back = client.read_bytes(chip, at, fresh.len()).await.unwrap();
    assert!(back == fresh, "round {round}: the write read back differs");
}

async fn reads_and_writes_cut_anywhere(mut client: ScpClient) {
    let chip = Address::core(0, 0, 0);
    let small = pattern(65_536, 7);
    client.write(chip, SMALL, &small).await.unwrap();
    let big = pattern(BIG_LEN, 8);
    client.write(chip, BIG, &big).await.unwrap();
    let mut cut_any = 0;
    for (round, &cut) in CUTS.iter().enumerate() {
        let round = round as u32;
        let mut buf = vec![0u8; BIG_LEN];
        let mut ops = [Op::Read {
            chip,
            address: BIG,
            buf: &mut buf,
        }];
        cut_any += u32::from(interrupted(&mut client, &mut ops, cut).await);
        next_calls_are_their_own(&mut client, &small, round).await;

        let other = pattern(BIG_LEN, 100 + round);
        let mut ops = [Op::Write {
            chip,
            address: BIG,
            data: &other,
        }];
        cut_any += u32::from(interrupted(&mut client, &mut ops, cut).await);
        next_calls_are_their_own(&mut client, &small, round + 100).await;
    }
    assert!(cut_any >= 10, "only {cut_any} of 12 transfers were cut");
    // The big region holds, chunk by chunk, what one of its writes put there.
    let written = client.read_bytes(chip, BIG, BIG_LEN).await.unwrap();
    assert_eq!(written.len(), BIG_LEN);
    let stats = client.stats();
    assert!(stats.retransmits < 1000, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_board_over_udp_serves_the_next_calls_after_any_cut() {
    within(120, async {
        let board = volley_emulator::testing::board_with_tcp(BoardConfig::default()).await;
        let client = ScpClient::connect(board.udp_addr(), ScpConfig::default())
            .await
            .unwrap();
        reads_and_writes_cut_anywhere(client).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_board_over_tcp_serves_the_next_calls_after_any_cut() {
    within(120, async {
        let board = volley_emulator::testing::board_with_tcp(BoardConfig::default()).await;
        let client = ScpClient::connect_tcp(board.tcp_addr().unwrap(), ScpConfig::default())
            .await
            .unwrap();
        reads_and_writes_cut_anywhere(client).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_serves_the_next_calls_after_a_cut() {
    within(120, async {
        let base = Ipv4Addr::new(127, 0, 24, 0);
        let _emulated = Emulated::bind(MachineConfig {
            boards: 3,
            base,
            ..MachineConfig::default()
        })
        .await
        .unwrap();
        let mut machine = Machine::discover(SocketAddr::from((base, 17893)), ScpConfig::default())
            .await
            .unwrap();
        let chips = machine.chips().to_vec();
        let chip_addr = |&(x, y): &(u8, u8)| Address::core(x, y, 0);
        let small: Vec<Vec<u8>> = (0..chips.len() as u32).map(|i| pattern(4, i)).collect();
        let writes: Vec<_> = chips
            .iter()
            .zip(&small)
            .map(|(c, bytes)| (chip_addr(c), SDRAM_BASE, &bytes[..]))
            .collect();
        machine.write_many(&writes).await.unwrap();
        for cut in [1u32, 2, 5, 20, 80] {
            // A read of 64 KiB from every chip, cut after `cut` polls.
            {
                let mut big: Vec<Vec<u8>> = chips.iter().map(|_| vec![0; 65_536]).collect();
                let mut reads: Vec<_> = chips
                    .iter()
                    .zip(big.iter_mut())
                    .map(|(c, buf)| (chip_addr(c), BIG, &mut buf[..]))
                    .collect();
                let mut read = core::pin::pin!(machine.read_many(&mut reads));
                for _ in 0..cut {
                    if futures::poll!(read.as_mut()).is_ready() {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
            }
            // Then 4 bytes of every chip (where a late 256-byte reply would not fit):
            // its own bytes, each.
            let mut back: Vec<Vec<u8>> = small.iter().map(|d| vec![0; d.len()]).collect();
            let mut reads: Vec<_> = chips
                .iter()
                .zip(back.iter_mut())
                .map(|(c, buf)| (chip_addr(c), SDRAM_BASE, &mut buf[..]))
                .collect();
            machine.read_many(&mut reads).await.unwrap();
            for (i, (want, got)) in small.iter().zip(&back).enumerate() {
                assert!(want == got, "cut {cut}: chip {:?} differs", chips[i]);
            }
        }
    })
    .await;
}
