//! Turns: how the heavy tests share this machine. A heavy test takes a turn ([`take`]) before it
//! starts what it needs and holds it to its end; the turn is two things:
//!
//! - its **lane**, when the test shares a part with others of its kind: the node tier's node (one
//!   per machine, `tests/cluster/up --with-node`) and the rollout scenarios' fleet (three planes
//!   shared by its scenarios). A lane runs one test at a time;
//! - a **place** among the heavy tests that run at once, at most [`AT_ONCE`]: each holds a plane
//!   or more with its controllers (about 1 GB each) and, measured, about half a core; a Kata
//!   build guest takes three ([`Need::places`]).
//!
//! An end-to-end world (a plane of its own with the real controllers) and a Kata-tier world (a
//! plane of its own, QEMU guests and host probes in directories of their own; the probes find
//! their VMs by sandbox id) share nothing with any other test, so they take a place only.
//!
//! Measured on 2026-12-06 (2 cores) with every heavy test in one lane (the former `SERIAL`
//! lock): the integration tests took 2,224 s with 0.83 of the 2 cores busy on average; the lane
//! held 1,673 s of it at 0.64, a heavy test 0.4 to 0.7 of a core (most of it waiting on Flux,
//! helm-controller, the kubelet and the guests). With turns: 836 s at 1.74.
//!
//! Under `tests/run` (`OSBX_TEST_TURNS`) each turn writes a line when it ends: the test and how
//! long it waited for its turn; `tests/run` subtracts the wait from the test's
//! wall time in its list of the slowest tests and prints the total waited.

use std::time::Instant;

use tokio::sync::{Mutex, MutexGuard, Semaphore, SemaphorePermit};

/// How many heavy tests run at once (see the module docs).
const AT_ONCE: usize = 5;

/// What a heavy test needs while it runs.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Need {
    /// An end-to-end world: a plane of its own with the real controllers.
    Plane,
    /// The rollout scenarios' fleet: three planes with the real controllers, shared by the
    /// scenarios.
    Fleet,
    /// The node tier's node.
    Node,
    /// A Kata-tier world: a plane of its own, QEMU guests, the real host probes.
    Kata,
    /// A Kata-tier world whose guest runs dockerd and a build under TCG: the one heavy test that
    /// keeps a core busy for minutes, and whose dockerd gives up on its containerd after a fixed
    /// time (seen on a saturated machine), so it takes three places.
    BuildGuest,
}

impl Need {
    /// How many of the [`AT_ONCE`] places it takes.
    const fn places(self) -> u32 {
        match self {
            Self::BuildGuest => 3,
            Self::Plane | Self::Fleet | Self::Node | Self::Kata => 1,
        }
    }

    /// The lane, for the kinds whose tests share a part.
    fn lane(self) -> Option<&'static Mutex<()>> {
        static NODE: Mutex<()> = Mutex::const_new(());
        static FLEET: Mutex<()> = Mutex::const_new(());
        match self {
            Self::Plane | Self::Kata | Self::BuildGuest => None,
            Self::Node => Some(&NODE),
            Self::Fleet => Some(&FLEET),
        }
    }
}

/// A heavy test's turn (see the module docs); ends when dropped.
pub(crate) struct Turn {
    test: String,
    waited: f64,
    _place: SemaphorePermit<'static>,
    _lane: Option<MutexGuard<'static, ()>>,
}

/// Wait for the turn of a test that needs `need`: its lane first, then its place. Tokio's locks
/// are fair (first come, first served) and do not poison when a test fails.
pub(crate) async fn take(need: Need) -> Turn {
    static PLACES: Semaphore = Semaphore::const_new(AT_ONCE);
    let asked = Instant::now();
    let lane = match need.lane() {
        Some(lane) => Some(lane.lock().await),
        None => None,
    };
    let place = PLACES.acquire_many(need.places()).await.expect("the places are never closed");
    // libtest runs each test on a thread named after it (and tokio's test runtime polls the
    // test's future on that thread).
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    Turn { test, waited: asked.elapsed().as_secs_f64(), _place: place, _lane: lane }
}

impl Drop for Turn {
    fn drop(&mut self) {
        use std::io::Write as _;
        let Some(path) = std::env::var_os("OSBX_TEST_TURNS") else { return };
        let line = format!("{}\t{:.1}\n", self.test, self.waited);
        // One write of one short line to a file opened for appending: lines from concurrent turns
        // do not interleave. A failure to record is not the test's failure.
        if let Ok(mut file) = std::fs::OpenOptions::new().append(true).create(true).open(path) {
            let _ = file.write_all(line.as_bytes());
        }
    }
}
