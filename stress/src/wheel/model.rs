//! The wheel scenario's reference: which timers exist, when they are due (in unwrapped
//! time), and in deadline order.

use std::collections::BTreeSet;

use ackwheel::TimerKey;
use rand::rngs::SmallRng;
use rand::Rng;

#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    pub(super) key: TimerKey,
    pub(super) deadline: u128,
    pub(super) id: u64,
    /// Index in `Model::live`; meaningful only while `live`.
    pub(super) pos: u32,
    pub(super) live: bool,
}

/// The reference: which timers exist, when they are due, and in deadline order.
#[derive(Debug, Default)]
pub(super) struct Model {
    pub(super) entries: Vec<Entry>,
    pub(super) free: Vec<u32>,
    pub(super) live: Vec<u32>,
    pub(super) order: BTreeSet<(u128, u64)>,
}

impl Model {
    pub(super) fn len(&self) -> usize {
        self.live.len()
    }

    /// The slot the next `insert` will use (known before scheduling, as it is the payload).
    pub(super) fn next_slot(&self) -> u32 {
        self.free
            .last()
            .copied()
            .unwrap_or(self.entries.len() as u32)
    }

    pub(super) fn insert(&mut self, key: TimerKey, deadline: u128, id: u64) -> u32 {
        let entry = Entry {
            key,
            deadline,
            id,
            pos: self.live.len() as u32,
            live: true,
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.entries[slot as usize] = entry;
                slot
            }
            None => {
                self.entries.push(entry);
                self.entries.len() as u32 - 1
            }
        };
        self.live.push(slot);
        self.order.insert((deadline, id));
        slot
    }

    /// The live entry in `slot` whose id is `id`, if there is one.
    pub(super) fn get(&self, slot: u32, id: u64) -> Option<&Entry> {
        self.entries
            .get(slot as usize)
            .filter(|e| e.live && e.id == id)
    }

    pub(super) fn remove(&mut self, slot: u32) -> Entry {
        let entry = self.entries[slot as usize];
        debug_assert!(entry.live);
        self.entries[slot as usize].live = false;
        self.live.swap_remove(entry.pos as usize);
        if let Some(&moved) = self.live.get(entry.pos as usize) {
            self.entries[moved as usize].pos = entry.pos;
        }
        self.free.push(slot);
        self.order.remove(&(entry.deadline, entry.id));
        entry
    }

    pub(super) fn set_deadline(&mut self, slot: u32, deadline: u128) {
        let entry = &mut self.entries[slot as usize];
        self.order.remove(&(entry.deadline, entry.id));
        entry.deadline = deadline;
        self.order.insert((deadline, entry.id));
    }

    pub(super) fn random_live(&self, rng: &mut SmallRng) -> Option<u32> {
        (!self.live.is_empty()).then(|| self.live[rng.random_range(0..self.live.len())])
    }

    pub(super) fn earliest(&self) -> Option<u128> {
        self.order.first().map(|&(d, _)| d)
    }
}
