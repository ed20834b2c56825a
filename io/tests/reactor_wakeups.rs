//! The patched reactor (`io/vendor/PATCHES.md`) still wakes a sleeping shard for everything it
//! sleeps on: a message another shard sends (the sleep takes a fence pair now, not
//! `membarrier`), and its own timers while a kept latency timer is armed. A lost wake-up shows
//! here as a shard that never answers: the watchdog fails the test instead of hanging.
#![cfg(all(target_os = "linux", feature = "glommio"))]

use std::sync::mpsc;
use std::time::Duration;

use vireo_io::glommio::{run_shards, ShardContext};

/// Round trips between two shards; each side sleeps between them, so every message races a
/// shard going to sleep.
const ROUND_TRIPS: u64 = 20_000;

/// Far beyond what the round trips take (well under a second each run here): only a lost
/// wake-up, a shard asleep with a message queued and no timer to end the sleep, gets there.
const WATCHDOG: Duration = Duration::from_secs(120);

fn cpus() -> Vec<usize> {
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    vec![0, 1 % available]
}

/// Runs `shard_main` on two shards under the watchdog; returns the shards' results.
fn under_watchdog<F, Fut>(what: &'static str, shard_main: F) -> Vec<u64>
where
    F: Fn(ShardContext<u64>) -> Fut + Send + Clone + 'static,
    Fut: std::future::Future<Output = u64> + 'static,
{
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let results = run_shards(&cpus(), 16, shard_main);
        let _ = done.send(results);
    });
    match finished.recv_timeout(WATCHDOG) {
        Ok(results) => results.expect("the shards run"),
        Err(_) => panic!("{what}: no answer within {WATCHDOG:?}: a shard slept through a wake-up"),
    }
}

#[test]
fn a_sleeping_shard_wakes_for_every_message_of_another() {
    let results = under_watchdog("ping-pong", |context: ShardContext<u64>| async move {
        let peer = 1 - context.shard;
        let mut last = 0;
        for round in 0..ROUND_TRIPS {
            if context.shard == 0 {
                context.senders.send_to(peer, round).await.expect("peer is there");
                last = context.receivers.recv_from(peer).await.expect("connected").expect("an answer");
                assert_eq!(last, round, "the echo of round {round}");
            } else {
                let ping = context.receivers.recv_from(peer).await.expect("connected").expect("a ping");
                context.senders.send_to(peer, ping).await.expect("peer is there");
                last = ping;
            }
        }
        last
    });
    assert_eq!(results, vec![ROUND_TRIPS - 1; 2]);
}

#[test]
fn a_shard_wakes_for_its_timers_between_messages() {
    // The echoing shard waits on a timer of 0 to 2 ms before each answer, while the other waits
    // on the channel with a timer of its own racing it: both sleep with a latency timer that
    // may be kept from an earlier turn, and each timer must still end its sleep in time.
    const ROUNDS: u64 = 2_000;
    let results = under_watchdog("timers", |context: ShardContext<u64>| async move {
        let peer = 1 - context.shard;
        let mut timers_fired = 0;
        for round in 0..ROUNDS {
            let pause = Duration::from_micros((round * 7919) % 2_000);
            if context.shard == 0 {
                context.senders.send_to(peer, round).await.expect("peer is there");
                let answer = context.receivers.recv_from(peer);
                let beat = glommio::timer::sleep(pause / 2);
                futures_lite::pin!(answer);
                match futures_lite::future::or(async { Some(answer.as_mut().await) }, async {
                    beat.await;
                    None
                })
                .await
                {
                    Some(echo) => assert_eq!(echo.expect("connected"), Some(round)),
                    None => {
                        timers_fired += 1;
                        assert_eq!(answer.await.expect("connected"), Some(round));
                    }
                }
            } else {
                let ping = context.receivers.recv_from(peer).await.expect("connected").expect("a ping");
                glommio::timer::sleep(pause).await;
                timers_fired += 1;
                context.senders.send_to(peer, ping).await.expect("peer is there");
            }
        }
        timers_fired
    });
    assert_eq!(results[1], ROUNDS, "the echoing shard's timers all fired");
    assert!(results[0] > 0, "the waiting shard's timer fired before some answers");
}
