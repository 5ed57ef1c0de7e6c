//! Expiry driven from outside the acker: what a task that runs a manual acker's passes
//! needs to sleep exactly (being written).
