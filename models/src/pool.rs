//! The sequential model of the work-stealing pool (SPEC Part B). Being written.
