//! Integration tests for Lockstep live in `tests/tests/`; this library is empty.
