//! Shutdown, and the handle users share: stop and join the reaper, take back every
//! initialized tree across each table's generations, then drop `on_complete` once no
//! operation can call it ([`marks`](crate::acker::threads::marks), "Closing the callback").
//! The module docs of [`engine`](crate::acker::engine) say what the scan can miss.

use std::thread;

use super::tables::generations::chain;
use super::{reaper, Config, Engine};
use crate::acker::table::word::Key;
use crate::sync::Ordering;

impl<T: Send + 'static> Engine<T> {
    /// Shutdown has begun: the reaper's loop ends and a manual driver stops.
    pub(in crate::acker) fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    /// Begins shutdown: the reaper's loop ends, and an init that reads the flag refuses
    /// its tree (or takes it back, if it settled the tree meanwhile).
    pub(super) fn stop_flag(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
    }

    /// Stops the reaper (joined by the caller), then takes back every initialized tree.
    pub(in crate::acker) fn take_back_all(&self) -> Vec<(u64, T)> {
        self.shutdown.store(true, Ordering::SeqCst);
        let mut handed_back = Vec::new();
        self.scan(&mut handed_back, false);
        if self.drop_callback() {
            // No operation is under way now, and every later one finds the callback closed
            // and changes nothing: the orphans left (held when shutdown came, or arrived
            // during the scan) are dropped, and any tree the scan did not take back (none
            // is expected: an init that settles after the scan takes its own back) is, so
            // that `pending()` is 0 once shutdown has returned.
            self.scan(&mut handed_back, true);
        }
        let mut late = self
            .late_handed_back
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        handed_back.append(&mut late);
        handed_back
    }

    /// Walks every entry of every table's chain of generations, taking back each LIVE
    /// tree into `handed_back`, and with `drop_orphans` dropping each HELD entry (counted
    /// as expired).
    fn scan(&self, handed_back: &mut Vec<(u64, T)>, drop_orphans: bool) {
        let _active = self.threads.enter();
        let mut dropped = 0;
        for (index, shard) in self.tables.shards.iter().enumerate() {
            // No migration starts under the scan; one under way moves entries only
            // forward, from the table scanned first to the one scanned next.
            let _held = shard.hold_migrations();
            // Safety: inside the operation `_active` marks.
            let table = unsafe { shard.current() };
            for table in chain(table) {
                for slot in 0..table.slots() {
                    let Some(key) = table.key_in(slot) else {
                        continue;
                    };
                    if let Some(payload) = table.take_back(slot, key) {
                        handed_back.push((self.tables.layout.root(index, key), payload));
                    } else if drop_orphans && table.discard(slot, key) {
                        dropped += 1;
                    }
                }
            }
        }
        // Relaxed: a statistic.
        self.tally().add(|c| &c.orphans_expired, dropped);
    }

    /// Shutdown came while this init settled: takes its tree back if no scan did, looking
    /// in the current generation and its successor.
    pub(in crate::acker) fn take_back_root(&self, shard: usize, key: Key) -> Option<T> {
        // Safety: called inside the init's operation.
        let table = unsafe { self.tables.shards[shard].current() };
        chain(table).find_map(|table| {
            let (slot, _) = table.find_waiting(key)?;
            table.take_back(slot, key)
        })
    }

    /// Drops the callback once no operation can call it any more: waits for operations
    /// that found it open. Not from inside the callback (an operation of this very thread
    /// is then under way): the callback stays, and this returns `false`.
    pub(in crate::acker) fn drop_callback(&self) -> bool {
        let caller_active = self.threads.caller_active();
        let mut backoff = crate::sync::Backoff::default();
        while !self.threads.close(caller_active) {
            if caller_active {
                return false;
            }
            // Bounded (spin, yield, sleep): the operation waited for may be on this core.
            backoff.wait();
        }
        // Safety: `close` returned true: no operation that found the callback open is under
        // way, and every later one finds it closed and does not touch it.
        let callback = unsafe { (*self.on_complete.get()).take() };
        // Safety: as for the callback, whose stand-in for a burst it is.
        let burst = unsafe { (*self.burst_hand_over.get()).take() };
        drop((callback, burst));
        true
    }

    /// Returns once every completion decided before the call has been delivered (its
    /// `on_complete` returned): a grace period over the operations under way, since an
    /// operation delivers what it completed before it returns. From inside an operation
    /// (the callback itself) it cannot wait for its own, and returns at once.
    pub(in crate::acker) fn wait_delivered(&self) {
        if self.threads.caller_active() {
            return;
        }
        let mut grace = self.threads.grace();
        let mut backoff = crate::sync::Backoff::default();
        while !self.threads.grace_over(&mut grace) {
            // Bounded (spin, yield, sleep): the operation waited for may be on this core.
            backoff.wait();
        }
    }
}

/// The part of a second-core acker that user handles share; dropping the last one stops
/// and joins the reaper.
pub(in crate::acker) struct Handle<T: Send + 'static> {
    pub(in crate::acker) engine: std::sync::Arc<Engine<T>>,
    reaper: std::sync::Mutex<Option<thread::JoinHandle<()>>>,
}

impl<T: Send + 'static> Handle<T> {
    /// Builds the core and, unless manual, starts its reaper.
    pub(in crate::acker) fn start(
        config: Config<T>,
    ) -> Result<std::sync::Arc<Self>, crate::ConfigError> {
        let manual = config.manual;
        let engine = std::sync::Arc::new(Engine::new(config));
        let thread = if manual {
            None
        } else {
            let handle = reaper::spawn(&engine).map_err(|e| crate::ConfigError::Spawn {
                what: "reaper thread",
                reason: e.to_string(),
            })?;
            engine.set_reaper_thread(handle.thread().clone());
            Some(handle)
        };
        Ok(std::sync::Arc::new(Handle {
            engine,
            reaper: std::sync::Mutex::new(thread),
        }))
    }

    /// Stops the reaper and waits for it (every caller but the reaper itself, which cannot
    /// wait for itself: it stops after its pass), then takes back every initialized tree.
    pub(in crate::acker) fn shutdown(&self) -> Vec<(u64, T)> {
        self.stop();
        self.engine.take_back_all()
    }

    /// Stops and joins the reaper. A second caller waits on the lock until the first has
    /// joined, so that every `shutdown` returns only after the reaper has stopped.
    fn stop(&self) {
        self.engine.stop_flag();
        self.engine.wake_driver();
        if self
            .engine
            .reaper
            .thread
            .get()
            .is_some_and(|t| t.id() == thread::current().id())
        {
            return;
        }
        let mut guard = self.reaper.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(handle) = guard.take() {
            handle.thread().unpark();
            // The loop catches panics ([`reaper`](crate::acker::engine::reaper)); a join
            // error is one it could not.
            if handle.join().is_err() {
                self.engine.count_reaper_panic();
            }
        }
    }
}

impl<T: Send + 'static> Drop for Handle<T> {
    fn drop(&mut self) {
        self.stop();
    }
}
