//! Random sequences of reads and writes, some of them cut off at a random poll (their
//! futures dropped, as a timeout, a `select!` or Ctrl-C in Python drops them), checked
//! against a model of the board's memory: every call that finishes sees exactly what the
//! calls before it left (bytes an interrupted write may or may not have reached are left
//! out of the check), over UDP, over TCP, and over UDP with replies lost inside the board.
//! The seeds are fixed, so a failure names the one to run again.

use volley_emulator::{BoardConfig, SDRAM_BASE};
use volley_proto::scp::sdp::Address;
use volley_testkit::within;
use volley_transport_udp::{Op, ScpClient, ScpConfig};

/// The region the calls use, and the most one call moves.
const BASE: u32 = SDRAM_BASE + (4 << 20);
const REGION: usize = 2 << 20;
const MAX_CALL: usize = 512 << 10;
/// Calls in one sequence.
const CALLS: usize = 60;

/// xorshift64*: small, seeded, enough to spread the calls.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The board's memory as the finished calls left it; `None` where an interrupted write
/// may or may not have landed.
struct Model(Vec<Option<u8>>);

impl Model {
    fn check(&self, offset: usize, got: &[u8], what: &str) {
        for (i, (want, got)) in self.0[offset..offset + got.len()]
            .iter()
            .zip(got)
            .enumerate()
        {
            if let Some(want) = want {
                assert_eq!(
                    want,
                    got,
                    "{what}: byte {i} of the read (offset {:#x}) differs",
                    offset + i
                );
            }
        }
    }
}

/// Polls `future` `polls` times (yielding between), then drops it; whether it was still
/// running when dropped.
async fn cut<F: Future>(future: F, polls: u64) -> Option<F::Output> {
    let mut future = core::pin::pin!(future);
    for _ in 0..polls {
        if let core::task::Poll::Ready(out) = futures::poll!(future.as_mut()) {
            return Some(out);
        }
        tokio::task::yield_now().await;
    }
    None
}

async fn random_calls(client: &mut ScpClient, seed: u64) {
    let chip = Address::core(0, 0, 0);
    let mut rng = Rng(seed.max(1));
    let start = volley_testkit::pattern(REGION, seed);
    client.write(chip, BASE, &start).await.unwrap();
    let mut model = Model(start.into_iter().map(Some).collect());
    let (mut cut_reads, mut cut_writes) = (0, 0);
    for call in 0..CALLS {
        let what = format!("seed {seed}, call {call}");
        // Word-aligned, at least a word, at most MAX_CALL and within the region.
        let len = 4 * (1 + rng.below((MAX_CALL / 4) as u64) as usize);
        let len = if rng.below(3) == 0 {
            len % 1024 + 4
        } else {
            len
        };
        let offset = 4 * rng.below(((REGION - len) / 4 + 1) as u64) as usize;
        let address = BASE + offset as u32;
        // A third of the calls are cut after 0 to 39 polls.
        let polls = (rng.below(3) == 0).then(|| rng.below(40));
        if rng.below(2) == 0 {
            let mut buf = vec![0u8; len];
            let mut ops = [Op::Read {
                chip,
                address,
                buf: &mut buf,
            }];
            match polls {
                None => {
                    client.execute(&mut ops).await.unwrap();
                    model.check(offset, &buf, &what);
                }
                Some(polls) => match cut(client.execute(&mut ops), polls).await {
                    Some(result) => {
                        result.unwrap();
                        model.check(offset, &buf, &what);
                    }
                    None => cut_reads += 1,
                },
            }
        } else {
            let data = volley_testkit::pattern(len, seed ^ (call as u64) << 32);
            let mut ops = [Op::Write {
                chip,
                address,
                data: &data,
            }];
            let landed = match polls {
                None => {
                    client.execute(&mut ops).await.unwrap();
                    true
                }
                Some(polls) => match cut(client.execute(&mut ops), polls).await {
                    Some(result) => {
                        result.unwrap();
                        true
                    }
                    None => {
                        cut_writes += 1;
                        false
                    }
                },
            };
            let region = &mut model.0[offset..offset + len];
            match landed {
                true => region
                    .iter_mut()
                    .zip(&data)
                    .for_each(|(m, d)| *m = Some(*d)),
                false => region.iter_mut().for_each(|m| *m = None),
            }
        }
    }
    assert!(
        cut_reads + cut_writes >= 5,
        "seed {seed}: only {cut_reads} reads and {cut_writes} writes were cut"
    );
    // The whole region at the end: every byte the model knows.
    let back = client.read_bytes(chip, BASE, REGION).await.unwrap();
    model.check(0, &back, &format!("seed {seed}, the last read"));
}

const SEEDS: [u64; 3] = [1, 0x5eed, 0xdead_beef];

/// Every seed's calls on one client of a board made with `config`, over TCP or UDP;
/// gives the client back for its counters.
async fn every_seed(config: BoardConfig, tcp: bool) -> ScpClient {
    let board = volley_emulator::testing::board_with_tcp(config).await;
    let mut client = match tcp {
        true => ScpClient::connect_tcp(board.tcp_addr().unwrap(), ScpConfig::default()).await,
        false => ScpClient::connect(board.udp_addr(), ScpConfig::default()).await,
    }
    .unwrap();
    for seed in SEEDS {
        random_calls(&mut client, seed).await;
    }
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_cuts_over_udp() {
    within(120, every_seed(BoardConfig::default(), false)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_cuts_over_tcp() {
    within(120, every_seed(BoardConfig::default(), true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_cuts_over_udp_with_replies_lost() {
    within(180, async {
        let config = BoardConfig {
            reply_loss: 0.01,
            seed: 42,
            // Lost replies free their tags after 20 ms, not SC&MP's 2.56 s.
            tto: 2,
            ..BoardConfig::default()
        };
        let client = every_seed(config, false).await;
        assert!(client.stats().retransmits > 0, "no reply was lost");
    })
    .await;
}
