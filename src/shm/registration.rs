//! A process joins a region as a participant: the slot it claims on first use (or in a
//! forked child), cached in its handle, the spare slot when every other is taken, and the
//! reclaiming of slots dead processes left.

#[cfg(doc)]
use super::config::Config;
use super::error::ShmError;
use super::identity;
use super::layout;
use super::participants;
use super::region::{claim_participant, Participant};
use super::types::ShmSafe;
use super::ShmMutex;
use core::sync::atomic::Ordering::*;
use std::time::{Duration, Instant};

impl<T: ShmSafe> ShmMutex<T> {
    /// This process's view, registering it as a participant on first use (and again in a
    /// forked child, whose fork generation differs), waiting as long as it takes for a
    /// participant slot.
    ///
    /// The registered case is a few instructions on every lock and unlock; registering is out
    /// of line.
    #[inline]
    pub(super) fn participant(&self) -> Participant<'_> {
        self.participant_of(identity::fork_generation())
    }

    /// [`participant`](Self::participant) for this process, whose fork generation the caller read: `generation`.
    #[inline]
    pub(super) fn participant_of(&self, generation: u32) -> Participant<'_> {
        match self.registered(generation) {
            Some(me) => Participant::new(&self.region, me),
            None => self.register_untimed(generation),
        }
    }

    #[cold]
    #[inline(never)]
    pub(super) fn register_untimed(&self, generation: u32) -> Participant<'_> {
        match self.register(generation, None, false) {
            Some(ctx) => ctx,
            None => unreachable!("an untimed registration never gives up"),
        }
    }

    /// [`participant`](Self::participant), giving up at `deadline` if every participant slot stays held by a
    /// live process.
    #[inline]
    pub(super) fn participant_by(&self, deadline: Option<Instant>) -> Option<Participant<'_>> {
        let generation = identity::fork_generation();
        match self.registered(generation) {
            Some(me) => Some(Participant::new(&self.region, me)),
            None => self.register(generation, deadline, false),
        }
    }

    /// Register this process as a participant now, if it is not one yet. Fails with
    /// [`ShmError::NoParticipantSlot`] if every participant slot ([`Config::participants`],
    /// default 64) is held by a live process. Otherwise a process registers on its first use
    /// of the lock, where `lock()` waits for a slot and `try_lock*` return `WouldBlock` at
    /// their deadline; `open`/`attach` already fail with that error when every slot is held by
    /// a live process at that moment.
    ///
    /// Registering costs a few system calls (the process's identity is its pid and its start
    /// time, read from `/proc/<pid>/stat`, plus a pidfd): about 0.1 ms, once per process (its
    /// handles on one mapping of the region share the slot; the last one dropped gives it
    /// back). A process whose first lock is latency-sensitive (a worker forked into a busy
    /// pool) can call `join` at start-up to pay it there.
    ///
    /// ```
    /// let m = gomutex::shm::ShmMutex::anonymous(0u32)?;
    /// m.join()?; // registered now; the first lock() below is a plain lock
    /// *m.lock().unwrap() += 1;
    /// assert_eq!(m.diagnostics().participants, 1);
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn join(&self) -> Result<(), ShmError> {
        let generation = identity::fork_generation();
        if self.registered(generation).is_some() {
            return Ok(());
        }
        // Reclaiming dead participants may need the spare slot another newcomer is using:
        // give that a moment, but fail at once when a scan found nobody to reclaim.
        match self.register(
            generation,
            Some(Instant::now() + Duration::from_secs(2)),
            true,
        ) {
            Some(_) => Ok(()),
            None => Err(ShmError::NoParticipantSlot {
                participants: self.region.layout.participants - 1,
            }),
        }
    }

    /// The participant index this handle cached for process `generation` (a fork generation), if
    /// that process registered one.
    #[inline]
    pub(super) fn registered(&self, generation: u32) -> Option<u32> {
        let c = self.registration.load(Relaxed);
        (c != 0 && (c >> 32) as u32 == generation).then(|| (c as u32) - 1)
    }

    /// `self`, if this process is registered or could register now: some participant slot is
    /// free or held by a dead process. (Checked, not claimed: a process that never locks takes
    /// no slot.)
    pub(super) fn checked(self) -> Result<Self, ShmError> {
        let r = &self.region;
        let n = r.layout.participants - 1;
        let generation = identity::fork_generation();
        let room = self.registered(generation).is_some()
            || participants::lock(generation).has(r.base() as usize)
            || (0..n).any(|i| {
                let ident = r.participant(i).ident.load(SeqCst);
                ident == 0 || r.participant(i).dead(ident)
            });
        if room {
            Ok(self)
        } else {
            Err(ShmError::NoParticipantSlot { participants: n })
        }
    }

    #[cold]
    pub(super) fn register(
        &self,
        generation: u32,
        deadline: Option<Instant>,
        certain: bool,
    ) -> Option<Participant<'_>> {
        let r = &self.region;
        let ident = identity::self_ident();
        let spare = r.layout.participants - 1;
        loop {
            if let Some(me) = self.registered(generation) {
                // Another thread of this process registered (while we waited for a slot, or
                // while we claimed one: then we gave ours back).
                return Some(Participant::new(r, me));
            }
            // Registrations of this process are made under its table's lock: the slot of
            // another handle on this region is shared, and a thread of this handle that
            // registered meanwhile is seen here.
            let table = participants::lock(generation);
            if let Some(me) = self.registered(generation) {
                return Some(Participant::new(r, me));
            }
            let base = r.base() as usize;
            let (got, claimed) = match table.share(base) {
                Some(i) => (Some(i), false),
                None => (claim_participant(r, ident, spare), true),
            };
            if let Some(i) = got {
                if claimed {
                    table.record(base, i);
                }
                self.registration
                    .store((u64::from(generation) << 32) | u64::from(i + 1), Relaxed);
                drop(table);
                if claimed {
                    // A newcomer gives back the slots of processes that died since the last
                    // scan, so slots are reused and the lowest indices stay the ones in use
                    // (what `ShmRwLock`'s writers scan).
                    Participant::new(r, i)
                        .until(deadline)
                        .scan_if_due(super::sys::mono_ns());
                }
                return Some(Participant::new(r, i));
            }
            drop(table);
            // Full: borrow the spare slot to reclaim dead participants. One thread at a
            // time, even within a process: a second user would go on scanning under the spare
            // index after the first gave the slot back and a third process claimed it, and two
            // processes with one index break the journal lock's "holder is dead" test (a
            // holder that is `me` is never taken over) and the per-participant accounting.
            //
            // A borrower that died with the spare slot (maybe holding the journal lock, or
            // owing a wake-up or a hand-off from the recovery it was doing) leaves its identity
            // there: adopt the slot, undoing what it left. Otherwise, with every regular slot
            // also held by the dead, no live process would have an index to recover from.
            let g = r.participant(spare);
            let held = g.ident.load(SeqCst);
            let took = if held == 0 {
                g.claim(0, ident)
            } else {
                held != ident && g.dead(held) && Participant::new(r, spare).adopt(held, ident)
            };
            if took {
                /// Gives the spare slot back, also if the scan unwinds.
                struct GiveBack<'a>(&'a layout::ParticipantSlot, u64);
                impl Drop for GiveBack<'_> {
                    fn drop(&mut self) {
                        self.0.free(self.1);
                    }
                }
                let _give_back = GiveBack(g, ident);
                let found = Participant::new(r, spare).scan(None).0;
                if certain
                    && found == 0
                    && (0..spare).all(|i| r.participant(i).ident.load(SeqCst) != 0)
                {
                    // Every regular slot is held by a live process: say so now.
                    return None;
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
