//! Watching a running job: reaping ranks, failing fast, forwarding signals,
//! the timeout, and the bounded SIGTERM/SIGKILL sequence that ends it.

use std::{
    thread,
    time::{Duration, Instant},
};

use crate::{
    JobEnd, KILL_WAIT, LAST_WORDS, LaunchError, POLL_INTERVAL, RankExit,
    job::{BootFailure, Job, Pe, Rendezvous, Secs, note},
    read_global_exit, signal_name, sys,
};

impl Job<'_> {
    pub(crate) fn live(&self) -> impl Iterator<Item = &Pe> {
        self.pes.iter().filter(|pe| pe.exit.is_none())
    }

    /// Sends `sig` to every rank still running; returns how many there were.
    pub(crate) fn signal_live(&self, sig: i32) -> usize {
        let mut live = 0;
        for pe in self.live() {
            pe.signal(sig);
            live += 1;
        }
        live
    }

    /// Reaps what has exited; returns the first failure among them. A rank
    /// that called `shmem_global_exit` ([`global_exit_path`](crate::shm::global_exit_path)) counts as the
    /// failure whatever its status (0 included), ahead of the ranks that
    /// failed because it left.
    pub(crate) fn reap(&mut self) -> Result<Option<(usize, RankExit)>, LaunchError> {
        let mut failed = None;
        let mut global = None;
        for (i, pe) in self.pes.iter_mut().enumerate() {
            if pe.exit.is_some() {
                continue;
            }
            match pe.child.try_wait() {
                Ok(None) => {}
                Ok(Some(status)) => {
                    let exit = RankExit::from_status(status);
                    pe.exit = Some(exit);
                    if !exit.success() && failed.is_none() {
                        failed = Some((i, exit));
                    }
                    if global.is_none()
                        && read_global_exit(self.job_id).is_some_and(|(r, _)| r == pe.rank)
                    {
                        global = Some((i, exit));
                    }
                }
                Err(source) => {
                    return Err(LaunchError::Wait {
                        rank: pe.rank,
                        source,
                    });
                }
            }
        }
        Ok(global.or(failed))
    }

    /// Watches the running job until every rank has exited (or would not die).
    pub(crate) fn supervise(
        &mut self,
        root: &mut Rendezvous,
        signals: &mut sys::SignalWatch,
    ) -> Result<JobEnd, LaunchError> {
        let grace = self.opts.grace;
        let start = Instant::now();
        let deadline = self.opts.timeout.and_then(|t| start.checked_add(t));
        let mut end = None;
        let mut sigkill_at: Option<Instant> = None;
        let mut give_up_at: Option<Instant> = None;
        let mut pending: Option<(BootFailure, Instant)> = None;
        loop {
            if let Some((i, exit)) = self.reap()?
                && end.is_none()
            {
                // Let the rank's last words out before naming it.
                let until = Instant::now() + LAST_WORDS;
                while !self.pes[i].output_done() && Instant::now() < until {
                    thread::sleep(Duration::from_millis(1));
                }
                let rank = self.pes[i].rank;
                let others = self.signal_live(libc::SIGTERM);
                let what = match read_global_exit(self.job_id) {
                    Some((r, status)) if r == rank => {
                        format!("rank {rank} called shmem_global_exit({status})")
                    }
                    _ => format!("rank {rank} {exit}"),
                };
                if others > 0 {
                    note(format_args!("{what}; stopping the other {others} rank(s)"));
                } else {
                    note(format_args!("{what}"));
                }
                end = Some(JobEnd::RankFailed { rank, exit });
                sigkill_at = Instant::now().checked_add(grace);
            }
            let live = self.live().count();
            if live == 0 {
                break;
            }
            let now = Instant::now();
            if let Some(sig) = signals.poll() {
                let name = signal_name(sig).unwrap_or("a signal");
                if end.is_none() {
                    note(format_args!("got {name}; forwarding it to {live} rank(s)"));
                    self.signal_live(sig);
                    end = Some(JobEnd::Signaled(sig));
                    sigkill_at = now.checked_add(grace);
                } else if give_up_at.is_none() {
                    note(format_args!("got {name} again; killing {live} rank(s)"));
                    self.signal_live(libc::SIGKILL);
                    give_up_at = Some(now + KILL_WAIT);
                }
            }
            if end.is_none()
                && let Some(deadline) = deadline
                && now >= deadline
            {
                let after = now - start;
                note(format_args!(
                    "timed out after {}; stopping {live} rank(s)",
                    Secs(self.opts.timeout.unwrap_or(after))
                ));
                self.signal_live(libc::SIGTERM);
                end = Some(JobEnd::TimedOut(after));
                sigkill_at = now.checked_add(grace);
            }
            // A rank that fails leaves the rendezvous without its goodbye, and
            // its exit may be reaped a little after the rendezvous says so:
            // the failure is weighed LAST_WORDS after it arrived.
            if self.bootstrap_error.is_none()
                && pending.is_none()
                && let Some(f) = root.poll_failure()
            {
                pending = Some((f, now));
            }
            if let Some((_, t)) = &pending
                && now.saturating_duration_since(*t) >= LAST_WORDS
                && let Some((f, _)) = pending.take()
            {
                self.report_bootstrap(f, end.is_some());
            }
            if give_up_at.is_none() && sigkill_at.is_some_and(|t| now >= t) {
                note(format_args!(
                    "{live} rank(s) still running {} after SIGTERM; sending SIGKILL",
                    Secs(grace)
                ));
                self.signal_live(libc::SIGKILL);
                give_up_at = Some(now + KILL_WAIT);
            }
            if give_up_at.is_some_and(|t| now >= t) {
                let stuck: Vec<String> = self.live().map(|pe| pe.rank.to_string()).collect();
                note(format_args!(
                    "rank(s) {} did not exit {} after SIGKILL; giving up on them",
                    stuck.join(", "),
                    Secs(KILL_WAIT)
                ));
                break;
            }
            thread::sleep(POLL_INTERVAL);
        }
        if let Some((f, _)) = pending {
            self.report_bootstrap(f, end.is_some());
        }
        Ok(end.unwrap_or(JobEnd::Success))
    }

    /// After a failed start: kills whatever was started and waits for it, bounded.
    pub(crate) fn kill_all(&mut self) {
        self.signal_live(libc::SIGKILL);
        let until = Instant::now() + KILL_WAIT;
        while self.live().count() > 0 && Instant::now() < until {
            if self.reap().is_err() {
                break;
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Waits, bounded, for the output threads to reach the end of their pipes.
    /// A pipe still open after every rank has exited is held by something a
    /// rank left behind in its process group: that gets SIGKILL after the grace
    /// time, and a pipe held even then is abandoned.
    pub(crate) fn drain_output(&mut self) {
        let wait = |pes: &[Pe], for_: Duration| {
            let until = Instant::now() + for_;
            while !pes.iter().all(Pe::output_done) && Instant::now() < until {
                thread::sleep(Duration::from_millis(1));
            }
        };
        wait(&self.pes, self.opts.grace.max(LAST_WORDS));
        if self.pes.iter().all(Pe::output_done) {
            for pe in &mut self.pes {
                for reader in pe.readers.drain(..) {
                    let _ = reader.join();
                }
            }
            return;
        }
        for pe in self.pes.iter().filter(|pe| !pe.output_done()) {
            pe.signal(libc::SIGKILL);
        }
        wait(&self.pes, Duration::from_secs(1));
        let held: Vec<String> = self
            .pes
            .iter()
            .filter(|pe| !pe.output_done())
            .map(|pe| pe.rank.to_string())
            .collect();
        if !held.is_empty() {
            note(format_args!(
                "the output of rank(s) {} is still held open after they exited; not waiting for it",
                held.join(", ")
            ));
        }
    }
}
