//! Configuration errors.

use std::fmt;

/// Invalid configuration (zero interval, fewer than 2 buckets, zero timeout, ...).
///
/// Every variant names the parameter at fault; `Display` says what was wrong with it.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// A duration or count that must be positive was zero.
    Zero {
        /// The parameter's name, as in the builder or constructor.
        param: &'static str,
    },
    /// Fewer buckets than the structure needs.
    TooFewBuckets {
        /// The parameter's name.
        param: &'static str,
        /// What was asked for.
        got: usize,
        /// The least that works.
        min: usize,
    },
    /// A value too large for the structure to represent.
    TooLarge {
        /// The parameter's name.
        param: &'static str,
        /// What was asked for, as text (it may be a duration or a count).
        got: String,
        /// The largest accepted value, as text.
        max: String,
    },
    /// Two settings that cannot be used together (`on_complete` on a builder that
    /// `build_async` finishes, say).
    Conflict {
        /// The setting at fault, as in the builder.
        param: &'static str,
        /// What it cannot be combined with.
        with: &'static str,
        /// Why not, in a few words.
        why: &'static str,
    },
    /// The operating system refused to start a thread the structure needs.
    Spawn {
        /// Which thread.
        what: &'static str,
        /// The operating system's error, as text.
        reason: String,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Zero { param } => write!(
                f,
                "invalid configuration: `{param}` must be greater than zero"
            ),
            ConfigError::TooFewBuckets { param, got, min } => write!(
                f,
                "invalid configuration: `{param}` is {got}, but at least {min} buckets are needed"
            ),
            ConfigError::TooLarge { param, got, max } => {
                write!(
                    f,
                    "invalid configuration: `{param}` is {got}, above the maximum of {max}"
                )
            }
            ConfigError::Conflict { param, with, why } => write!(
                f,
                "invalid configuration: `{param}` cannot be used with `{with}`: {why}"
            ),
            ConfigError::Spawn { what, reason } => {
                write!(f, "could not start the {what}: {reason}")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_parameter() {
        let e = ConfigError::TooFewBuckets {
            param: "num_buckets",
            got: 1,
            min: 2,
        };
        let msg = e.to_string();
        assert!(
            msg.contains("num_buckets") && msg.contains('1') && msg.contains('2'),
            "{msg}"
        );
        assert!(ConfigError::Zero { param: "interval" }
            .to_string()
            .contains("`interval`"));
        let conflict = ConfigError::Conflict {
            param: "on_complete",
            with: "build_async",
            why: "its completions go elsewhere",
        }
        .to_string();
        assert!(
            conflict.contains("`on_complete`") && conflict.contains("`build_async`"),
            "{conflict}"
        );
        let boxed: Box<dyn std::error::Error> = Box::new(e);
        assert!(boxed.to_string().contains("num_buckets"));
    }
}
