//! What crosses NATS between the fleet's processes, byte for byte.
//!
//! Every core NATS message is a **frame**: many fixed-size records for one destination,
//! gathered for about a millisecond (`node::outbox`), so that NATS carries a few large
//! messages instead of one per ack. Records are little-endian and fixed-size, so a frame is
//! valid exactly when its length is a multiple of its record size and every record's kind
//! is known; anything else is a [`Malformed`] frame, counted and dropped by the receiver,
//! never a panic.
//!
//! | subject | frame of | record |
//! |---|---|---|
//! | `<run>.part.<p>` | messages for partition `p`'s Acker | kind 1 + origin 4 + pad 3 + root 8 + xor 8 = 24 B |
//! | `<run>.task.<n>` | sub-tasks for node `n` | root 8 + edge 8 = 16 B |
//! | `<run>.done.<n>` | completions for origin `n` | root 8 + outcome 1 + pad 7 = 16 B |
//!
//! A work item in the JetStream stream is its number (8 B); a record of the completed
//! stream is a batch of [`Completed`] records (24 B each).

use ackwheel::Outcome;

/// A frame that is not a whole number of known records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One message for a partition's Acker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartMessage {
    /// A new tree: the XOR of its first edges, and the node that waits for its completion.
    Init { root: u64, xor: u64, origin: u32 },
    /// Edges acked.
    Ack { root: u64, xor: u64 },
    /// A sub-task failed.
    Fail { root: u64 },
}

impl PartMessage {
    pub const SIZE: usize = 24;

    pub fn root(&self) -> u64 {
        match *self {
            PartMessage::Init { root, .. }
            | PartMessage::Ack { root, .. }
            | PartMessage::Fail { root } => root,
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let (kind, origin, root, xor) = match *self {
            PartMessage::Init { root, xor, origin } => (1u8, origin, root, xor),
            PartMessage::Ack { root, xor } => (2, 0, root, xor),
            PartMessage::Fail { root } => (3, 0, root, 0),
        };
        out.push(kind);
        out.extend_from_slice(&origin.to_le_bytes());
        out.extend_from_slice(&[0; 3]);
        out.extend_from_slice(&root.to_le_bytes());
        out.extend_from_slice(&xor.to_le_bytes());
    }

    /// Every record of a partition frame, or why the frame is malformed (then none).
    pub fn decode_frame(frame: &[u8]) -> Result<Vec<PartMessage>, Malformed> {
        let records = whole_records(frame, Self::SIZE, "partition")?;
        records
            .map(|r| {
                let origin = u32::from_le_bytes(r[1..5].try_into().expect("4 bytes"));
                let root = u64_at(r, 8);
                let xor = u64_at(r, 16);
                match r[0] {
                    1 => Ok(PartMessage::Init { root, xor, origin }),
                    2 => Ok(PartMessage::Ack { root, xor }),
                    3 => Ok(PartMessage::Fail { root }),
                    kind => Err(Malformed(format!("unknown partition record kind {kind}"))),
                }
            })
            .collect()
    }
}

/// A sub-task: ack `edge` of `root`'s tree once done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Task {
    pub root: u64,
    pub edge: u64,
}

impl Task {
    pub const SIZE: usize = 16;

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.root.to_le_bytes());
        out.extend_from_slice(&self.edge.to_le_bytes());
    }

    pub fn decode_frame(frame: &[u8]) -> Result<Vec<Task>, Malformed> {
        Ok(whole_records(frame, Self::SIZE, "task")?
            .map(|r| Task {
                root: u64_at(r, 0),
                edge: u64_at(r, 8),
            })
            .collect())
    }
}

/// A tree's completion, sent by its owner to its origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    pub root: u64,
    pub outcome: Outcome,
}

impl Done {
    pub const SIZE: usize = 16;

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.root.to_le_bytes());
        out.push(match self.outcome {
            Outcome::Acked => 1,
            Outcome::Failed => 2,
            _ => 3,
        });
        out.extend_from_slice(&[0; 7]);
    }

    pub fn decode_frame(frame: &[u8]) -> Result<Vec<Done>, Malformed> {
        whole_records(frame, Self::SIZE, "completion")?
            .map(|r| {
                let outcome = match r[8] {
                    1 => Outcome::Acked,
                    2 => Outcome::Failed,
                    3 => Outcome::TimedOut,
                    kind => return Err(Malformed(format!("unknown outcome {kind}"))),
                };
                Ok(Done {
                    root: u64_at(r, 0),
                    outcome,
                })
            })
            .collect()
    }
}

/// One line of the completed record: `item` was acked by a tree that `node` started on the
/// item's `delivery`-th delivery, `latency_us` after the node pulled it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completed {
    pub item: u64,
    pub node: u32,
    pub delivery: u32,
    pub latency_us: u64,
}

impl Completed {
    pub const SIZE: usize = 24;

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.item.to_le_bytes());
        out.extend_from_slice(&self.node.to_le_bytes());
        out.extend_from_slice(&self.delivery.to_le_bytes());
        out.extend_from_slice(&self.latency_us.to_le_bytes());
    }

    pub fn decode_frame(frame: &[u8]) -> Result<Vec<Completed>, Malformed> {
        Ok(whole_records(frame, Self::SIZE, "completed")?
            .map(|r| Completed {
                item: u64_at(r, 0),
                node: u32::from_le_bytes(r[8..12].try_into().expect("4 bytes")),
                delivery: u32::from_le_bytes(r[12..16].try_into().expect("4 bytes")),
                latency_us: u64_at(r, 16),
            })
            .collect())
    }
}

/// A work item's body: its number.
pub fn encode_item(item: u64) -> Vec<u8> {
    item.to_le_bytes().to_vec()
}

pub fn decode_item(body: &[u8]) -> Result<u64, Malformed> {
    let bytes: [u8; 8] = body
        .try_into()
        .map_err(|_| Malformed(format!("a work item of {} bytes, not 8", body.len())))?;
    Ok(u64::from_le_bytes(bytes))
}

/// The partition that owns `root`: a SplitMix64 finalizer of the root, modulo `partitions`
/// (a function of the root alone, the same in every process; `docs/scaling.md`).
pub fn owner(root: u64, partitions: usize) -> usize {
    let mut z = root;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) % partitions.max(1) as u64) as usize
}

fn whole_records<'a>(
    frame: &'a [u8],
    size: usize,
    what: &str,
) -> Result<std::slice::ChunksExact<'a, u8>, Malformed> {
    if !frame.len().is_multiple_of(size) {
        return Err(Malformed(format!(
            "a {what} frame of {} bytes is not a whole number of {size}-byte records",
            frame.len()
        )));
    }
    Ok(frame.chunks_exact(size))
}

fn u64_at(record: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(record[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_frames_round_trip() {
        let messages = [
            PartMessage::Init {
                root: u64::MAX,
                xor: 7,
                origin: 2,
            },
            PartMessage::Ack { root: 1, xor: 3 },
            PartMessage::Fail { root: 9 },
        ];
        let mut frame = Vec::new();
        for m in &messages {
            m.encode(&mut frame);
        }
        assert_eq!(frame.len(), 3 * PartMessage::SIZE);
        assert_eq!(PartMessage::decode_frame(&frame).unwrap(), messages);
    }

    #[test]
    fn malformed_frames_are_refused_whole() {
        let mut frame = Vec::new();
        PartMessage::Ack { root: 1, xor: 3 }.encode(&mut frame);
        assert!(PartMessage::decode_frame(&frame[..23]).is_err());
        frame[0] = 9;
        assert!(PartMessage::decode_frame(&frame).is_err());
        assert!(Task::decode_frame(&[0; 17]).is_err());
        assert!(
            Done::decode_frame(&[0; 16]).is_err(),
            "outcome 0 is no outcome"
        );
        assert!(Completed::decode_frame(&[0; 25]).is_err());
        assert!(decode_item(&[0; 7]).is_err());
        assert_eq!(PartMessage::decode_frame(&[]).unwrap(), vec![]);
    }

    #[test]
    fn tasks_completions_and_records_round_trip() {
        let mut frame = Vec::new();
        Task { root: 5, edge: 6 }.encode(&mut frame);
        assert_eq!(
            Task::decode_frame(&frame).unwrap(),
            vec![Task { root: 5, edge: 6 }]
        );
        let mut frame = Vec::new();
        for outcome in [Outcome::Acked, Outcome::Failed, Outcome::TimedOut] {
            Done { root: 4, outcome }.encode(&mut frame);
        }
        let outcomes: Vec<_> = Done::decode_frame(&frame)
            .unwrap()
            .iter()
            .map(|d| d.outcome)
            .collect();
        assert_eq!(
            outcomes,
            [Outcome::Acked, Outcome::Failed, Outcome::TimedOut]
        );
        let record = Completed {
            item: 11,
            node: 2,
            delivery: 3,
            latency_us: 99,
        };
        let mut frame = Vec::new();
        record.encode(&mut frame);
        assert_eq!(Completed::decode_frame(&frame).unwrap(), vec![record]);
        assert_eq!(decode_item(&encode_item(42)).unwrap(), 42);
    }

    #[test]
    fn owners_spread_roots_evenly() {
        let mut counts = [0u32; 3];
        for root in 1..30_001u64 {
            counts[owner(root.wrapping_mul(0x9E37_79B9_7F4A_7C15), 3)] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_000..11_000).contains(&c)),
            "{counts:?}"
        );
    }
}
