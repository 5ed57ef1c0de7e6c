//! One wheel thread's work: a sequence of episodes, each a fresh `TimerWheel` driven by
//! random operations and checked after every one against its [`Model`].

use std::time::Duration;

use ackwheel::{TimerKey, TimerWheel};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::model::Model;
use super::{Limits, ThreadReport};

/// The wheel's payload: the model slot of the timer and its unique id.
type Payload = (u32, u64);

/// Unwrapped time starts here, so deadlines in the past never underflow.
const ABS_START: u128 = 1 << 64;

/// Largest distance of a new deadline from now (far beyond the top level, within the
/// wrapping timeline's 2^63 horizon).
const MAX_AHEAD: u128 = 1 << 62;

/// Largest single forward move of the clock.
const MAX_JUMP: u128 = 1 << 61;

/// How many recently dead keys are kept to probe with.
const DEAD_KEYS: usize = 256;

/// Runs the wheel scenario on this thread until its share of operations is done, the time
/// cap passes, another thread fails, or this one does.
pub(crate) fn run(seed: u64, limits: &Limits) -> ThreadReport {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut ops = 0u64;
    let mut fired = 0u64;
    let mut episodes = 0u64;
    let mut failure = None;
    'run: while ops < limits.ops {
        let mut episode = Episode::new(&mut rng);
        let length = rng
            .random_range(200_000..2_000_000u64)
            .min(limits.ops - ops);
        episodes += 1;
        let mut done = 0;
        while done < length {
            if done % 4096 == 0 && limits.expired() {
                ops += done;
                fired += episode.fired;
                break 'run;
            }
            if let Err(e) = episode.step(&mut rng) {
                failure = Some(format!(
                    "seed {seed}, episode {episodes} ({}), op {done}: {e}",
                    episode.describe()
                ));
                ops += done;
                break 'run;
            }
            done += 1;
        }
        ops += done;
        fired += episode.fired;
        if let Err(e) = episode.check_iter() {
            failure = Some(format!(
                "seed {seed}, episode {episodes} ({}), at its end: {e}",
                episode.describe()
            ));
            break;
        }
    }
    ThreadReport {
        ops,
        detail: format!("{fired} timers fired, {episodes} wheels"),
        failure,
        elapsed: Duration::ZERO,
    }
}

/// One wheel and its model.
struct Episode {
    wheel: TimerWheel<Payload>,
    model: Model,
    origin: u64,
    /// log2 of the wheel's resolution.
    shift: u32,
    /// The wheel's time, unwrapped.
    now: u128,
    /// Population above which scheduling turns into cancelling.
    cap: usize,
    next_id: u64,
    dead: Vec<TimerKey>,
    fired: u64,
}

impl Episode {
    fn new(rng: &mut SmallRng) -> Self {
        let shift = [0, 10, 20, 20, 30, 30, 43][rng.random_range(0..7)];
        let resolution = 1u64 << shift;
        // Origins near the interesting edges sit a few hundred ticks before them, so the
        // episode's clock crosses the edge early on.
        let before_edge = |rng: &mut SmallRng| rng.random_range(0..resolution.saturating_mul(512));
        let origin = match rng.random_range(0..4) {
            0 => 0,
            1 => (1u64 << 63).wrapping_sub(before_edge(rng)),
            2 => u64::MAX.wrapping_sub(before_edge(rng)),
            _ => rng.random(),
        };
        let wheel = if shift == 30 {
            TimerWheel::new(origin)
        } else {
            TimerWheel::with_resolution(origin, Duration::from_nanos(resolution))
        };
        assert_eq!(wheel.resolution(), resolution, "resolution of 2^{shift} ns");
        Episode {
            wheel,
            model: Model::default(),
            origin,
            shift,
            now: ABS_START,
            cap: [64, 1024, 16_384, 100_000][rng.random_range(0..4)],
            next_id: 0,
            dead: Vec::with_capacity(DEAD_KEYS),
            fired: 0,
        }
    }

    fn describe(&self) -> String {
        format!(
            "origin {:#x}, resolution 2^{} ns, cap {}, wheel now {:#x}, {} timers",
            self.origin,
            self.shift,
            self.cap,
            self.wheel.now(),
            self.model.len()
        )
    }

    /// An unwrapped instant as the wheel sees it.
    fn wrap(&self, t: u128) -> u64 {
        self.origin.wrapping_add(t as u64)
    }

    fn resolution(&self) -> u128 {
        1 << self.shift
    }

    /// One random operation and its checks.
    fn step(&mut self, rng: &mut SmallRng) -> Result<(), String> {
        let full = self.model.len() >= self.cap;
        match rng.random_range(0..1000u32) {
            0..=349 if !full => self.schedule(rng),
            0..=499 => self.cancel(rng),
            500..=669 => self.reschedule(rng),
            670..=709 => self.probe_stale(rng),
            710..=759 => self.inspect(rng),
            760..=789 => self.check_delay(),
            _ => self.advance(rng),
        }?;
        if self.wheel.len() != self.model.len() {
            return Err(format!(
                "len() is {}, model has {}",
                self.wheel.len(),
                self.model.len()
            ));
        }
        Ok(())
    }

    /// A deadline relative to now: mostly ahead, at every level's scale, sometimes already
    /// due, sometimes far beyond the top level.
    fn random_deadline(&self, rng: &mut SmallRng) -> u128 {
        let r = self.resolution();
        let ahead = match rng.random_range(0..100u32) {
            0..=7 => return self.now - rng.random_range(0..=r * 4),
            8..=9 => return self.now - rng.random_range(0..=1u128 << 40),
            10..=13 => 0,
            14..=53 => rng.random_range(1..r * 64),
            54..=73 => rng.random_range(1..r << 12),
            74..=85 => rng.random_range(1..r << 17),
            86..=95 => rng.random_range(1..r << 21),
            _ => rng.random_range(1..=MAX_AHEAD),
        };
        self.now + ahead.min(MAX_AHEAD)
    }

    fn schedule(&mut self, rng: &mut SmallRng) -> Result<(), String> {
        let deadline = self.random_deadline(rng);
        let id = self.next_id;
        self.next_id += 1;
        let slot = self.model.next_slot();
        let key = self.wheel.schedule(self.wrap(deadline), (slot, id));
        let inserted = self.model.insert(key, deadline, id);
        debug_assert_eq!(inserted, slot);
        Ok(())
    }

    fn cancel(&mut self, rng: &mut SmallRng) -> Result<(), String> {
        let Some(slot) = self.model.random_live(rng) else {
            return self.schedule(rng);
        };
        let entry = self.model.remove(slot);
        match self.wheel.cancel(entry.key) {
            Some(value) if value == (slot, entry.id) => {}
            other => {
                return Err(format!(
                    "cancel of live timer {} returned {other:?}",
                    entry.id
                ))
            }
        }
        self.bury(entry.key, rng);
        Ok(())
    }

    fn reschedule(&mut self, rng: &mut SmallRng) -> Result<(), String> {
        let Some(slot) = self.model.random_live(rng) else {
            return self.schedule(rng);
        };
        let deadline = self.random_deadline(rng);
        let entry = self.model.entries[slot as usize];
        if !self.wheel.reschedule(entry.key, self.wrap(deadline)) {
            return Err(format!("reschedule of live timer {} refused", entry.id));
        }
        self.model.set_deadline(slot, deadline);
        Ok(())
    }

    /// Remembers a key that must stay stale.
    fn bury(&mut self, key: TimerKey, rng: &mut SmallRng) {
        if self.dead.len() < DEAD_KEYS {
            self.dead.push(key);
        } else {
            self.dead[rng.random_range(0..DEAD_KEYS)] = key;
        }
    }

    fn probe_stale(&mut self, rng: &mut SmallRng) -> Result<(), String> {
        if self.dead.is_empty() {
            return self.schedule(rng);
        }
        let key = self.dead[rng.random_range(0..self.dead.len())];
        let deadline = self.wrap(self.random_deadline(rng));
        if let Some(value) = self.wheel.cancel(key) {
            return Err(format!("cancel of stale {key:?} returned {value:?}"));
        }
        if self.wheel.reschedule(key, deadline) {
            return Err(format!("reschedule of stale {key:?} accepted"));
        }
        if let Some(d) = self.wheel.deadline(key) {
            return Err(format!("deadline of stale {key:?} is {d:#x}"));
        }
        if let Some(value) = self.wheel.get(key) {
            return Err(format!("get of stale {key:?} is {value:?}"));
        }
        Ok(())
    }

    fn inspect(&mut self, rng: &mut SmallRng) -> Result<(), String> {
        let Some(slot) = self.model.random_live(rng) else {
            return self.schedule(rng);
        };
        let entry = self.model.entries[slot as usize];
        let expected = (slot, entry.id);
        if self.wheel.deadline(entry.key) != Some(self.wrap(entry.deadline)) {
            return Err(format!(
                "deadline of timer {} is {:?}, model says {:#x}",
                entry.id,
                self.wheel.deadline(entry.key),
                self.wrap(entry.deadline)
            ));
        }
        if self.wheel.get(entry.key) != Some(&expected) {
            return Err(format!(
                "get of timer {} is {:?}",
                entry.id,
                self.wheel.get(entry.key)
            ));
        }
        match self.wheel.get_mut(entry.key) {
            Some(value) if *value == expected => Ok(()),
            other => Err(format!("get_mut of timer {} is {other:?}", entry.id)),
        }
    }

    /// `next_expiration_delay` may not sleep past the end of the tick of the earliest
    /// deadline (or of the current tick, when that deadline is already due).
    fn check_delay(&mut self) -> Result<(), String> {
        let delay = self.wheel.next_expiration_delay();
        let Some(earliest) = self.model.earliest() else {
            return match delay {
                None => Ok(()),
                Some(d) => Err(format!("next_expiration_delay is Some({d}) while empty")),
            };
        };
        let Some(delay) = delay else {
            return Err(format!(
                "next_expiration_delay is None with {} timers",
                self.model.len()
            ));
        };
        let now = self.wheel.now();
        let limit_tick_of = if earliest <= self.now {
            now
        } else {
            self.wrap(earliest)
        };
        let tick_end = (limit_tick_of >> self.shift)
            .wrapping_add(1)
            .wrapping_shl(self.shift);
        let bound = tick_end.wrapping_sub(now);
        if delay == 0 || delay > bound {
            return Err(format!(
                "next_expiration_delay is {delay}, but the earliest timer (at {:#x}) needs a \
                 wake-up within {bound}",
                self.wrap(earliest)
            ));
        }
        Ok(())
    }

    fn advance(&mut self, rng: &mut SmallRng) -> Result<(), String> {
        let r = self.resolution();
        let jump = match rng.random_range(0..100u32) {
            0..=19 => rng.random_range(0..r),
            20..=44 => r * rng.random_range(1..=2) + rng.random_range(0..r),
            45..=64 => rng.random_range(0..r * 64),
            65..=76 => rng.random_range(0..r << 12),
            77..=83 => rng.random_range(0..r << 17),
            84..=86 => rng.random_range(0..r << 21),
            87 => rng.random_range(0..MAX_JUMP),
            88..=96 => self.wheel.next_expiration_delay().map_or(r, u128::from),
            _ => return self.advance_backwards(rng),
        }
        .min(MAX_JUMP);
        let bound = (rng.random_range(0..5u32) == 0).then(|| rng.random_range(0..=8usize));

        let previous = self.wheel.now();
        self.now += jump;
        let now = self.wrap(self.now);
        let crossed_tick = previous >> self.shift != now >> self.shift;
        let (unwrapped_now, shift) = (self.now, self.shift);
        let mut yielded = 0usize;
        let mut drained = true;
        let mut iter = self.wheel.advance(now);
        loop {
            if bound.is_some_and(|n| yielded == n) {
                drained = false;
                break;
            }
            let Some(expired) = iter.next() else {
                break;
            };
            yielded += 1;
            let (slot, id) = expired.value;
            let Some(entry) = self.model.get(slot, id).copied() else {
                return Err(format!(
                    "advance to {now:#x} yielded timer {id} (deadline {:#x}), which is not \
                     scheduled (never, or yielded / cancelled before)",
                    expired.deadline
                ));
            };
            let wrapped_deadline = self.origin.wrapping_add(entry.deadline as u64);
            if expired.key != entry.key || expired.deadline != wrapped_deadline {
                return Err(format!(
                    "advance yielded timer {id} as ({:?}, {:#x}), model has ({:?}, {:#x})",
                    expired.key, expired.deadline, entry.key, wrapped_deadline
                ));
            }
            let late = unwrapped_now.checked_sub(entry.deadline);
            // A timer found due but left over by a bounded advance may, after further
            // moves, lie 2^63 or more behind, where the wrapping rule cannot see it; it was
            // due when found, which is what the unwrapped check says.
            let wrapped_due = (now.wrapping_sub(expired.deadline) as i64) >= 0;
            if late.is_none() || (!wrapped_due && late < Some(1 << 63)) {
                return Err(format!(
                    "advance to {now:#x} (from {previous:#x}) yielded timer {id} due at \
                     {:#x}, not yet due",
                    expired.deadline
                ));
            }
            self.model.remove(slot);
            if self.dead.len() < DEAD_KEYS {
                self.dead.push(expired.key);
            } else {
                self.dead[id as usize % DEAD_KEYS] = expired.key;
            }
        }
        self.fired += yielded as u64;

        if crossed_tick && drained {
            if let Some(earliest) = self.model.earliest().filter(|&d| d <= unwrapped_now) {
                return Err(format!(
                    "advance from {previous:#x} to {now:#x} (a later tick at resolution \
                     2^{shift}) drained, yet a timer due at {:#x} was not yielded",
                    self.wrap(earliest)
                ));
            }
        }
        if self.wheel.now() != now {
            return Err(format!(
                "after advance to {now:#x}, the wheel's time is {:#x}",
                self.wheel.now()
            ));
        }
        Ok(())
    }

    fn advance_backwards(&mut self, rng: &mut SmallRng) -> Result<(), String> {
        let before = self.wheel.now();
        let back = before.wrapping_sub(rng.random_range(1..=1u64 << 62));
        let yielded = self.wheel.advance(back).count();
        if yielded != 0 || self.wheel.now() != before {
            return Err(format!(
                "advance backwards from {before:#x} to {back:#x} yielded {yielded} timers, \
                 wheel time now {:#x}",
                self.wheel.now()
            ));
        }
        Ok(())
    }

    /// `iter()` lists exactly the model's timers once each, and `iter().rev()` mirrors it.
    fn check_iter(&self) -> Result<(), String> {
        let forward: Vec<TimerKey> = self.wheel.iter().map(|(k, _, _)| k).collect();
        if forward.len() != self.model.len() || self.wheel.iter().len() != self.model.len() {
            return Err(format!(
                "iter() lists {} timers, model has {}",
                forward.len(),
                self.model.len()
            ));
        }
        let mut seen = vec![false; self.model.entries.len()];
        for (key, deadline, &(slot, id)) in self.wheel.iter() {
            let entry = self
                .model
                .get(slot, id)
                .ok_or_else(|| format!("iter() lists timer {id}, which the model does not have"))?;
            if entry.key != key || self.wrap(entry.deadline) != deadline {
                return Err(format!(
                    "iter() lists timer {id} with the wrong key or deadline"
                ));
            }
            if std::mem::replace(&mut seen[slot as usize], true) {
                return Err(format!("iter() lists timer {id} twice"));
            }
        }
        let backward: Vec<TimerKey> = self.wheel.iter().rev().map(|(k, _, _)| k).collect();
        if !forward.iter().eq(backward.iter().rev()) {
            return Err("iter().rev() is not iter() reversed".to_string());
        }
        Ok(())
    }
}
