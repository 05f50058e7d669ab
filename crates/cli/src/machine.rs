//! `volley machine info|bench`: a machine of many boards, discovered from its root
//! board; and the discovery `volley scp --machine` shares.

use std::time::Instant;

use anyhow::bail;
use rand::{Rng, SeedableRng};
use volley_proto::scp::sdp::Address;
use volley_transport_udp::{ScpConfig, check_range};

use crate::args::hex;
use crate::scp::{Tuning, discover, mbit};

/// `volley machine` subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Discover a machine and print its boards; the last line on stdout is
    /// `boards=B chips=C secs=S`.
    Info {
        /// The root board: HOST or HOST:PORT (port 17893 by default).
        root: String,
        #[command(flatten)]
        tuning: Tuning,
    },
    /// Write random bytes to every chip of a machine at once, read them back and check
    /// them; ends on stdout with `chips=C bytes=B write_secs=W read_secs=R
    /// write_mbit=X read_mbit=Y` (B over all chips; Mbit as `volley scp` counts it).
    Bench {
        /// The root board: HOST or HOST:PORT (port 17893 by default).
        root: String,
        /// Bytes to write to each chip, 1 to 134217728 (a chip's SDRAM).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1 << 27))]
        bytes_per_chip: u32,
        /// Where on each chip, hexadecimal.
        #[arg(long, default_value = "0x60000000", value_parser = hex)]
        addr: u32,
        /// Seed for the random bytes.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[command(flatten)]
        tuning: Tuning,
    },
}

/// Most bytes `machine bench` holds (what it writes, and the copy it reads back).
const MAX_BENCH_BYTES: u64 = 2 << 30;

pub(crate) async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Info { root, tuning } => {
            let machine = discover(&root, tuning.config()).await?;
            let geometry = machine.geometry();
            println!(
                "machine {} x {} chips, {} boards",
                geometry.width(),
                geometry.height(),
                geometry.boards()
            );
            for board in machine.boards() {
                println!(
                    "board {:>4}  ethernet chip ({}, {})  at {}  window {}",
                    board.index, board.ethernet.0, board.ethernet.1, board.addr, board.window
                );
            }
            let cores: u64 = machine
                .chip_infos()
                .iter()
                .map(|i| u64::from(i.cores))
                .sum();
            println!("{} live chips, {cores} cores", machine.chips().len());
            println!(
                "boards={} chips={} secs={:.3}",
                machine.boards().len(),
                machine.chips().len(),
                machine.discovery_time().as_secs_f64()
            );
            Ok(())
        }
        Command::Bench {
            root,
            bytes_per_chip,
            addr,
            seed,
            tuning,
        } => bench(&root, bytes_per_chip, addr, seed, tuning.config()).await,
    }
}

async fn bench(
    root: &str,
    bytes_per_chip: u32,
    addr: u32,
    seed: u64,
    config: ScpConfig,
) -> anyhow::Result<()> {
    check_range(addr, bytes_per_chip as usize)?;
    let mut machine = discover(root, config).await?;
    let chips: Vec<Address> = machine
        .chips()
        .iter()
        .map(|&(x, y)| Address::core(x, y, 0))
        .collect();
    let per_chip = u64::from(bytes_per_chip);
    let total = per_chip * chips.len() as u64;
    if total * 2 > MAX_BENCH_BYTES {
        bail!(
            "{bytes_per_chip} bytes on each of {} chips is {total} bytes, written and read \
             back: more than the {} MiB this bench holds; ask for fewer bytes per chip",
            chips.len(),
            MAX_BENCH_BYTES >> 20
        );
    }
    eprintln!(
        "discovered {} boards, {} chips in {:.3} s; writing {bytes_per_chip} bytes to each chip",
        machine.boards().len(),
        chips.len(),
        machine.discovery_time().as_secs_f64()
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut data = vec![0u8; total as usize];
    rng.fill(&mut data[..]);
    let per_chip = per_chip as usize;
    let writes: Vec<_> = chips
        .iter()
        .zip(data.chunks(per_chip))
        .map(|(&chip, bytes)| (chip, addr, bytes))
        .collect();
    let started = Instant::now();
    machine.write_many(&writes).await?;
    let write_secs = started.elapsed().as_secs_f64();
    let mut back = vec![0u8; data.len()];
    let mut reads: Vec<_> = chips
        .iter()
        .zip(back.chunks_mut(per_chip))
        .map(|(&chip, buf)| (chip, addr, buf))
        .collect();
    let started = Instant::now();
    machine.read_many(&mut reads).await?;
    let read_secs = started.elapsed().as_secs_f64();
    drop(reads);
    if let Some(i) = (0..chips.len())
        .find(|&i| data[i * per_chip..][..per_chip] != back[i * per_chip..][..per_chip])
    {
        bail!(
            "chip ({}, {}) read back differently from what was written",
            chips[i].x,
            chips[i].y
        );
    }
    println!(
        "chips={} bytes={total} write_secs={write_secs:.3} read_secs={read_secs:.3} \
         write_mbit={:.2} read_mbit={:.2}",
        chips.len(),
        mbit(total) / write_secs.max(1e-9),
        mbit(total) / read_secs.max(1e-9)
    );
    Ok(())
}
