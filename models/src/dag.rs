//! The sequential model of the dependency-aware scheduler (SPEC Part A). Being written.
