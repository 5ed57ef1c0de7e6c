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
///
/// Costs: one cleaner thread per map (asleep between rotations), one mutex around
/// `num_buckets` hash maps, one map entry per key; a `put` probes every bucket.
///
/// ```
/// use ackwheel::TimeCacheMap;
/// use std::sync::mpsc;
/// use std::time::Duration;
///
/// let (expired, rx) = mpsc::channel();
/// let pending = TimeCacheMap::with_callback(Duration::from_millis(20), 2, move |k, v| {
///     let _ = expired.send((k, v));
/// })
/// .unwrap();
/// pending.put("tuple 7", 7);
/// assert!(pending.contains_key(&"tuple 7"));
/// // Expires 20 to 40 ms after its put, on the cleaner thread.
/// assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), ("tuple 7", 7));
/// assert!(pending.is_empty());
/// ```
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

#[cfg(test)]
mod tests {
    use super::*;
    // Only the threaded tests use these, and Miri skips them.
    #[cfg(not(miri))]
    use std::sync::atomic::AtomicUsize;
    #[cfg(not(miri))]
    use std::sync::mpsc;

    #[test]
    fn fewer_than_two_buckets_or_zero_expiration_is_an_error() {
        for n in [0, 1] {
            let e = RotatingMap::<u32, u32>::new(n).unwrap_err();
            assert_eq!(
                e,
                ConfigError::TooFewBuckets {
                    param: "num_buckets",
                    got: n,
                    min: 2
                }
            );
            assert!(TimeCacheMap::<u32, u32>::new(Duration::from_secs(1), n).is_err());
        }
        let e = TimeCacheMap::<u32, u32>::new(Duration::ZERO, 3).unwrap_err();
        assert_eq!(
            e,
            ConfigError::Zero {
                param: "expiration"
            }
        );
        assert!(RotatingMap::<u32, u32>::new(2).is_ok());
    }

    #[test]
    fn a_key_survives_n_minus_one_rotations() {
        for n in 2..6 {
            let m = RotatingMap::new(n).unwrap();
            assert_eq!(m.put("k", 1), None);
            for r in 0..n - 1 {
                assert!(m.rotate().is_empty(), "n {n}, rotation {r}");
                assert_eq!(m.get(&"k"), Some(1));
            }
            assert_eq!(m.rotate(), vec![("k", 1)], "n {n}");
            assert!(!m.contains_key(&"k"));
            assert!(m.is_empty());
        }
    }

    #[test]
    fn put_refreshes_and_moves_out_of_older_buckets() {
        let m = RotatingMap::new(3).unwrap();
        m.put(1, "a");
        m.rotate();
        m.rotate(); // 1 is in the oldest bucket now
        assert_eq!(
            m.put(1, "b"),
            Some("a"),
            "previous value from an older bucket"
        );
        assert_eq!(m.len(), 1, "not left behind in the old bucket");
        assert!(m.rotate().is_empty(), "refreshed: not dropped");
        assert!(m.rotate().is_empty());
        assert_eq!(m.put(1, "c"), Some("b"));
        assert_eq!(m.put(1, "d"), Some("c"), "same newest bucket");
        assert_eq!(m.len(), 1);
        assert_eq!(m.remove(&1), Some("d"));
        assert_eq!(m.remove(&1), None);
        assert_eq!(m.get(&1), None);
    }

    #[test]
    fn len_counts_every_bucket_and_lookups_search_all() {
        let m = RotatingMap::new(4).unwrap();
        m.put(1, 10);
        m.rotate();
        m.put(2, 20);
        m.rotate();
        m.put(3, 30);
        assert_eq!(m.len(), 3);
        assert_eq!(m.num_buckets(), 4);
        for k in 1..=3 {
            assert!(m.contains_key(&k));
            assert_eq!(m.get(&k), Some(k * 10));
        }
        let mut dropped = Vec::new();
        for _ in 0..4 {
            dropped.extend(m.rotate());
        }
        dropped.sort_unstable();
        assert_eq!(dropped, vec![(1, 10), (2, 20), (3, 30)]);
        assert!(format!("{m:?}").contains("bucket_lens"));
    }

    #[test]
    fn concurrent_puts_and_rotations_lose_nothing() {
        let per: u32 = if cfg!(miri) { 20 } else { 2_000 };
        let m = Arc::new(RotatingMap::new(3).unwrap());
        let writers: Vec<_> = (0..2u32)
            .map(|w| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    for i in 0..per {
                        m.put(w * per + i, i);
                    }
                })
            })
            .collect();
        let mut dropped = Vec::new();
        for _ in 0..10 {
            dropped.extend(m.rotate());
        }
        for w in writers {
            w.join().unwrap();
        }
        for _ in 0..3 {
            dropped.extend(m.rotate());
        }
        let mut keys: Vec<u32> = dropped.into_iter().map(|(k, _)| k).collect();
        keys.sort_unstable();
        assert_eq!(keys, (0..2 * per).collect::<Vec<_>>());
    }

    #[cfg(not(miri))]
    #[test]
    fn time_cache_map_expires_within_its_window() {
        // 3 buckets, 300 ms: rotations every 150 ms; an entry expires 300..450 ms after put.
        let expiration = Duration::from_millis(300);
        let (tx, rx) = mpsc::channel();
        let m = TimeCacheMap::with_callback(expiration, 3, move |k: u32, v: Instant| {
            let _ = tx.send((k, v.elapsed()));
        })
        .unwrap();
        assert_eq!(m.rotation_period(), Duration::from_millis(150));
        m.put(1, Instant::now());
        assert!(m.contains_key(&1));
        let (k, age) = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("entry never expired");
        assert_eq!(k, 1);
        assert!(age >= expiration, "expired early, after {age:?}");
        // 450 ms plus generous scheduling slack on the late side only.
        assert!(
            age < Duration::from_millis(450) + Duration::from_secs(2),
            "far too late: {age:?}"
        );
        assert!(!m.contains_key(&1));
        assert_eq!(m.get(&1), None);
    }

    #[cfg(not(miri))]
    #[test]
    fn time_cache_map_put_refreshes_lifetime() {
        let m = TimeCacheMap::new(Duration::from_millis(200), 2).unwrap();
        let start = Instant::now();
        m.put("k", 1);
        // Keep refreshing for longer than the expiration; the key must stay.
        while start.elapsed() < Duration::from_millis(500) {
            m.put("k", 1);
            assert!(m.contains_key(&"k"), "expired while being refreshed");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(m.contains_key(&"k"));
        let deadline = Instant::now() + Duration::from_secs(5);
        while m.contains_key(&"k") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            !m.contains_key(&"k"),
            "did not expire after refreshing stopped"
        );
        assert!(m.is_empty());
    }

    #[cfg(not(miri))]
    #[test]
    fn drop_stops_the_cleaner_promptly() {
        let m = TimeCacheMap::<u32, u32>::new(Duration::from_secs(60), 2).unwrap();
        m.put(1, 1);
        std::thread::sleep(Duration::from_millis(20)); // the cleaner is asleep in its wait
        let start = Instant::now();
        drop(m);
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "drop waited out the rotation period"
        );
    }

    #[cfg(not(miri))]
    #[test]
    fn a_panicking_callback_does_not_kill_the_cleaner() {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&calls);
        let m = TimeCacheMap::with_callback(Duration::from_millis(20), 2, move |k: u32, _v: ()| {
            seen.fetch_add(1, Ordering::SeqCst);
            assert!(k != 1, "callback panics on key 1 (expected in this test)");
        })
        .unwrap();
        m.put(1, ());
        let deadline = Instant::now() + Duration::from_secs(5);
        while m.callback_panics() == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(m.callback_panics(), 1);
        m.put(2, ());
        while calls.load(Ordering::SeqCst) < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "cleaner stopped after the panic"
        );
        assert!(!m.contains_key(&2));
        assert!(format!("{m:?}").contains("callback_panics: 1"));
    }
}
