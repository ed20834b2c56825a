//! What the client listener does when the process runs out of file descriptors (EMFILE, ENFILE)
//! or the kernel of socket memory: an *episode*, said once when it begins and once, with its
//! count, when it ends, instead of a line per failed `accept`.
//!
//! During an episode the connections waiting in the listen backlog are refused, not left hanging:
//! the listener keeps one spare descriptor (`SpareDescriptor`, `/dev/null`), gives it up to accept
//! one waiting connection and closes that at once (its client sees the connection closed), then
//! takes the spare back, and goes on with the next one waiting: the surplus is refused as fast as
//! it comes, and an empty backlog makes the listener wait, not spin. Where the spare cannot help
//! (it could not be taken back), the listener waits before it tries again, twice as long each
//! time up to `BACKOFF_MAX`, so a process at its limit spends almost no CPU on it, while the
//! connections it holds are served as before. The first connection accepted ends the episode.

use std::io;
use std::time::{Duration, Instant};

/// The first wait after a failed accept, and the longest.
pub const BACKOFF_MIN: Duration = Duration::from_millis(5);
pub const BACKOFF_MAX: Duration = Duration::from_millis(200);

/// Whether an accept failed for want of a resource the process or the kernel ran out of (the
/// episode this module is for), rather than for one connection (reset before it was accepted).
pub fn is_exhaustion(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

/// One episode of exhaustion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Episode {
    pub since: Instant,
    /// Connections accepted with the spare descriptor and closed at once.
    pub refused: u64,
    /// Accepts that failed.
    pub failures: u64,
    delay: Duration,
}

/// What the listener logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpisodeLine {
    Began,
    Ended(Episode),
}

/// The listener's state between accepts.
#[derive(Debug, Default)]
pub struct AcceptBackoff {
    episode: Option<Episode>,
    /// Refused over the process's life (`/metrics`).
    pub refused_total: u64,
}

impl AcceptBackoff {
    pub fn in_episode(&self) -> bool {
        self.episode.is_some()
    }

    /// An accept failed for exhaustion: how long to wait before the next, and whether the episode
    /// began with it.
    pub fn on_exhausted(&mut self, now: Instant) -> (Duration, Option<EpisodeLine>) {
        match &mut self.episode {
            Some(episode) => {
                episode.failures += 1;
                episode.delay = (episode.delay * 2).min(BACKOFF_MAX);
                (episode.delay, None)
            }
            None => {
                self.episode = Some(Episode { since: now, refused: 0, failures: 1, delay: BACKOFF_MIN });
                (BACKOFF_MIN, Some(EpisodeLine::Began))
            }
        }
    }

    /// A waiting connection was accepted with the spare descriptor and closed.
    pub fn on_refused(&mut self) {
        self.refused_total += 1;
        if let Some(episode) = &mut self.episode {
            episode.refused += 1;
        }
    }

    /// A connection was accepted and kept: the episode, if one was going on, is over.
    pub fn on_accepted(&mut self) -> Option<EpisodeLine> {
        self.episode.take().map(EpisodeLine::Ended)
    }
}

/// A descriptor held in reserve so that a process out of descriptors can still accept (and close)
/// the connections it cannot serve.
#[derive(Debug)]
pub struct SpareDescriptor {
    spare: Option<std::fs::File>,
}

impl SpareDescriptor {
    pub fn new() -> SpareDescriptor {
        SpareDescriptor { spare: std::fs::File::open("/dev/null").ok() }
    }

    /// Gives the spare up (the descriptor becomes free for one accept). False if none was held.
    pub fn release(&mut self) -> bool {
        self.spare.take().is_some()
    }

    pub fn held(&self) -> bool {
        self.spare.is_some()
    }

    /// Takes the spare back (fails quietly while the process is still at its limit: tried again
    /// at the next episode).
    pub fn retake(&mut self) {
        if self.spare.is_none() {
            self.spare = std::fs::File::open("/dev/null").ok();
        }
    }
}

impl Default for SpareDescriptor {
    fn default() -> Self {
        SpareDescriptor::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_episode_is_said_once_in_and_once_out_with_its_count_and_backs_off() {
        let mut backoff = AcceptBackoff::default();
        let start = Instant::now();
        assert_eq!(backoff.on_exhausted(start), (BACKOFF_MIN, Some(EpisodeLine::Began)));
        let mut waits = Vec::new();
        for _ in 0..10 {
            let (wait, line) = backoff.on_exhausted(start);
            assert_eq!(line, None, "one line per episode");
            waits.push(wait);
            backoff.on_refused();
        }
        assert_eq!(waits[0], BACKOFF_MIN * 2);
        assert!(waits.windows(2).all(|pair| pair[1] >= pair[0]));
        assert_eq!(*waits.last().unwrap(), BACKOFF_MAX);
        match backoff.on_accepted() {
            Some(EpisodeLine::Ended(episode)) => {
                assert_eq!((episode.refused, episode.failures, episode.since), (10, 11, start));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(backoff.on_accepted(), None, "nothing to end");
        assert_eq!(backoff.on_exhausted(start).0, BACKOFF_MIN, "a new episode starts from the shortest wait");
        assert_eq!(backoff.refused_total, 10);
    }

    #[test]
    fn running_out_of_descriptors_is_exhaustion_and_a_reset_is_not() {
        assert!(is_exhaustion(&io::Error::from_raw_os_error(libc::EMFILE)));
        assert!(is_exhaustion(&io::Error::from_raw_os_error(libc::ENFILE)));
        assert!(!is_exhaustion(&io::Error::from_raw_os_error(libc::ECONNABORTED)));
    }
}
