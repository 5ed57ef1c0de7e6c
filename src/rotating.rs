//! Storm's `RotatingMap` and `TimeCacheMap`, thread-safe.
//!
//! # Algorithm
//!
//! A [`RotatingMap`] is a ring of `n` generations (hash maps), newest first. `put` writes
//! into the newest generation and deletes the key from every older one; `rotate` drops the
//! oldest generation, pushes an empty newest one and hands back what was dropped. So a key
//! survives `n - 1` rotations after its last `put` and comes back from the next one.
//! Lookups search newest to oldest.
//!
//! # Invariants
//!
//! * A key is in at most one generation (every `put` removes it from the others).
//! * There are always exactly `n >= 2` generations.
//!
//! # Why one mutex
//!
//! The whole ring sits behind one `crate::sync::Mutex<VecDeque<HashMap>>`. Every operation
//! touches several generations (a `put` probes all `n`), and `rotate` must move a key's whole
//! history at once, so finer locks would need a lock per generation taken in order — more
//! lock traffic for the common `put`, not less. Critical sections are a few hash probes; the
//! dropped generation is moved out under the lock and turned into a `Vec` (and handed to the
//! callback, for [`TimeCacheMap`]) after it is released. This part of the crate is the
//! compatibility layer for Storm-shaped code, not the lock-free engine.
//!
//! [`TimeCacheMap`] owns a `RotatingMap` and a cleaner thread that rotates it every
//! `expiration / (n - 1)` = `P`. An entry put at `t` is dropped by the `n`th rotation after `t`;
//! the first comes within `(0, P]`, so that is between `(n - 1) P = expiration` and
//! `n P = expiration * n / (n - 1)` after its last put.
//! The cleaner sleeps on a `Condvar` with a timeout and a stop flag, so `Drop` wakes it and
//! joins it at once. Expiry callbacks run on the cleaner outside every lock; a panicking
//! callback is caught and counted, and the cleaner carries on.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::Hash;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::PoisonError;
use std::time::{Duration, Instant};

use crate::error::ConfigError;
use crate::sync::{thread, Arc, AtomicU64, Condvar, Mutex, MutexGuard, Ordering};

/// Locks `m`, ignoring poisoning: each critical section leaves the ring consistent before it
/// runs user code (`Hash`/`Eq`) that could panic.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// === impl RotatingMap ===

/// Storm's RotatingMap, thread-safe (`&self` everywhere).
///
/// ```
/// use ackwheel::RotatingMap;
///
/// let m = RotatingMap::new(3).unwrap();
/// m.put("a", 1);
/// assert!(m.rotate().is_empty());
/// assert!(m.rotate().is_empty());            // "a" survived num_buckets - 1 = 2 rotations
/// assert_eq!(m.rotate(), vec![("a", 1)]);    // and the next one returns it
/// ```
pub struct RotatingMap<K, V> {
    /// Generations, newest at the front. Always `num_buckets` long.
    buckets: Mutex<VecDeque<HashMap<K, V>>>,
}

impl<K: Eq + Hash, V> RotatingMap<K, V> {
    /// A map of `num_buckets` generations.
    ///
    /// # Errors
    /// [`ConfigError::TooFewBuckets`] when `num_buckets < 2`.
    pub fn new(num_buckets: usize) -> Result<Self, ConfigError> {
        if num_buckets < 2 {
            return Err(ConfigError::TooFewBuckets {
                param: "num_buckets",
                got: num_buckets,
                min: 2,
            });
        }
        let buckets = (0..num_buckets).map(|_| HashMap::new()).collect();
        Ok(RotatingMap {
            buckets: Mutex::new(buckets),
        })
    }

    /// Puts `key` into the newest generation, removing it from all older ones. Returns the
    /// previous value, from whichever generation held it.
    pub fn put(&self, key: K, value: V) -> Option<V> {
        let mut buckets = lock(&self.buckets);
        let mut older = buckets.iter_mut();
        let newest = older.next()?;
        // At most one generation holds the key; stop at the first.
        let previous = match newest.get_mut(&key) {
            Some(slot) => return Some(std::mem::replace(slot, value)),
            None => older.find_map(|b| b.remove(&key)),
        };
        newest.insert(key, value);
        previous
    }

    /// The value for `key`, searching newest to oldest.
    pub fn get(&self, key: &K) -> Option<V>
    where
        V: Clone,
    {
        lock(&self.buckets).iter().find_map(|b| b.get(key).cloned())
    }

    /// `true` when some generation holds `key`.
    pub fn contains_key(&self, key: &K) -> bool {
        lock(&self.buckets).iter().any(|b| b.contains_key(key))
    }

    /// Removes `key` from whichever generation holds it.
    pub fn remove(&self, key: &K) -> Option<V> {
        lock(&self.buckets).iter_mut().find_map(|b| b.remove(key))
    }

    /// The number of entries over all generations.
    pub fn len(&self) -> usize {
        lock(&self.buckets).iter().map(HashMap::len).sum()
    }

    /// `true` when every generation is empty.
    pub fn is_empty(&self) -> bool {
        lock(&self.buckets).iter().all(HashMap::is_empty)
    }

    /// The number of generations.
    pub fn num_buckets(&self) -> usize {
        lock(&self.buckets).len()
    }

    /// Drops the oldest generation, adds an empty newest one, returns what was dropped.
    /// A key survives `num_buckets - 1` rotations after its last put.
    pub fn rotate(&self) -> Vec<(K, V)> {
        let dropped = {
            let mut buckets = lock(&self.buckets);
            let dropped = buckets.pop_back().unwrap_or_default();
            buckets.push_front(HashMap::new());
            dropped
        };
        // Outside the lock: the drain and the Vec's allocation.
        dropped.into_iter().collect()
    }
}

impl<K, V> fmt::Debug for RotatingMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let buckets = lock(&self.buckets);
        let sizes: Vec<usize> = buckets.iter().map(HashMap::len).collect();
        f.debug_struct("RotatingMap")
            .field("bucket_lens", &sizes)
            .finish()
    }
}

// === impl TimeCacheMap ===

/// What the owner and the cleaner share.
struct Shared<K, V> {
    map: RotatingMap<K, V>,
    /// `true` once the owner is dropped; the cleaner exits when it sees it.
    stop: Mutex<bool>,
    wake: Condvar,
    callback_panics: AtomicU64,
}

type Callback<K, V> = Box<dyn Fn(K, V) + Send + Sync + 'static>;

/// Storm's TimeCacheMap: a [`RotatingMap`] rotated by its own cleaner thread every
/// `expiration / (num_buckets - 1)`.
///
/// An entry expires between `expiration` and `expiration * num_buckets / (num_buckets - 1)`
/// after its last put (plus scheduling delay). Drop stops and joins the cleaner promptly.
/// The callback runs on the cleaner, outside every lock; a panic in it is caught, counted
/// ([`callback_panics`](Self::callback_panics)) and does not stop the cleaner.
pub struct TimeCacheMap<K, V> {
    shared: Arc<Shared<K, V>>,
    cleaner: Option<thread::JoinHandle<()>>,
    period: Duration,
}

impl<K: Eq + Hash + Send + Sync + 'static, V: Send + Sync + 'static> TimeCacheMap<K, V> {
    /// A map whose entries expire `expiration` after their last put, without a callback.
    ///
    /// # Errors
    /// [`ConfigError`] when `expiration` is zero or `num_buckets < 2`.
    pub fn new(expiration: Duration, num_buckets: usize) -> Result<Self, ConfigError> {
        Self::build(expiration, num_buckets, None)
    }

    /// A map that calls `on_expire(key, value)` for every entry it expires.
    ///
    /// # Errors
    /// [`ConfigError`] when `expiration` is zero or `num_buckets < 2`.
    pub fn with_callback(
        expiration: Duration,
        num_buckets: usize,
        on_expire: impl Fn(K, V) + Send + Sync + 'static,
    ) -> Result<Self, ConfigError> {
        Self::build(expiration, num_buckets, Some(Box::new(on_expire)))
    }

    fn build(
        expiration: Duration,
        num_buckets: usize,
        on_expire: Option<Callback<K, V>>,
    ) -> Result<Self, ConfigError> {
        if expiration.is_zero() {
            return Err(ConfigError::Zero {
                param: "expiration",
            });
        }
        let map = RotatingMap::new(num_buckets)?;
        let generations = u32::try_from(num_buckets - 1).unwrap_or(u32::MAX);
        // At least 1 ns so the cleaner cannot spin.
        let period = (expiration / generations).max(Duration::from_nanos(1));
        let shared = Arc::new(Shared {
            map,
            stop: Mutex::new(false),
            wake: Condvar::new(),
            callback_panics: AtomicU64::new(0),
        });
        let cleaner_shared = Arc::clone(&shared);
        let cleaner = thread::Builder::new()
            .name("ackwheel-timecachemap".into())
            .spawn(move || clean(&cleaner_shared, period, on_expire.as_deref()))
            .map_err(|e| ConfigError::Spawn {
                what: "TimeCacheMap cleaner thread",
                reason: e.to_string(),
            })?;
        Ok(TimeCacheMap {
            shared,
            cleaner: Some(cleaner),
            period,
        })
    }

    /// Puts `key` with a fresh lifetime; returns the previous value.
    pub fn put(&self, key: K, value: V) -> Option<V> {
        self.shared.map.put(key, value)
    }

    /// The value for `key` if it has not expired.
    pub fn get(&self, key: &K) -> Option<V>
    where
        V: Clone,
    {
        self.shared.map.get(key)
    }

    /// `true` when `key` is held.
    pub fn contains_key(&self, key: &K) -> bool {
        self.shared.map.contains_key(key)
    }

    /// Removes `key` without calling the callback.
    pub fn remove(&self, key: &K) -> Option<V> {
        self.shared.map.remove(key)
    }

    /// The number of entries held.
    pub fn len(&self) -> usize {
        self.shared.map.len()
    }

    /// `true` when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.shared.map.is_empty()
    }

    /// How often the cleaner rotates: `expiration / (num_buckets - 1)`.
    pub fn rotation_period(&self) -> Duration {
        self.period
    }

    /// How many expiry callbacks have panicked (each was caught; the cleaner went on).
    pub fn callback_panics(&self) -> u64 {
        // Relaxed: a statistic; no other memory depends on it.
        self.shared.callback_panics.load(Ordering::Relaxed)
    }
}

/// The cleaner's loop: sleep one period (waking early only to stop), rotate, call back.
fn clean<K, V>(
    shared: &Shared<K, V>,
    period: Duration,
    on_expire: Option<&(dyn Fn(K, V) + Send + Sync)>,
) where
    K: Eq + Hash,
{
    let mut next = Instant::now() + period;
    loop {
        {
            let mut stop = lock(&shared.stop);
            loop {
                if *stop {
                    return;
                }
                let now = Instant::now();
                if now >= next {
                    break;
                }
                // A timed wait, not a sleep: Drop sets the flag and notifies, and we return
                // within one wake-up. Spurious wake-ups just go round again.
                stop = shared
                    .wake
                    .wait_timeout(stop, next - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
        // Fixed-rate schedule: a slow callback delays one rotation, not all later ones;
        // after a long stall we resume from now rather than rotating in a burst.
        next += period;
        let now = Instant::now();
        if next < now {
            next = now + period;
        }
        let expired = shared.map.rotate();
        if let Some(callback) = on_expire {
            for (k, v) in expired {
                if catch_unwind(AssertUnwindSafe(|| callback(k, v))).is_err() {
                    // Relaxed: a statistic, read by `callback_panics`.
                    shared.callback_panics.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

impl<K, V> Drop for TimeCacheMap<K, V> {
    fn drop(&mut self) {
        *lock(&self.shared.stop) = true;
        self.shared.wake.notify_all();
        if let Some(cleaner) = self.cleaner.take() {
            // The cleaner never panics outside caught callbacks; if it somehow did, there is
            // nothing useful to do with the payload in a destructor.
            let _ = cleaner.join();
        }
    }
}

impl<K, V> fmt::Debug for TimeCacheMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimeCacheMap")
            .field("map", &self.shared.map)
            .field("rotation_period", &self.period)
            // Relaxed: a statistic for display.
            .field(
                "callback_panics",
                &self.shared.callback_panics.load(Ordering::Relaxed),
            )
            .finish()
    }
}
