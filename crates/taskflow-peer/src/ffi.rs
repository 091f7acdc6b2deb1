//! The C interface of `graph.cpp`, behind a safe owner.
//!
//! Protocol: `lockstep_tf_new` returns an owned `Graph*` (or null) that only
//! [`Graph`] holds; it is freed once, by `Drop`. `run`, `order` and `reset` take the pointer
//! while the owner is borrowed (`&mut` for the calls that write), so no two calls on one graph
//! overlap from Rust, and the C++ side touches the graph's data only inside those calls (its
//! worker threads run tasks only between `run`'s start and its `wait`). The CSR arrays are
//! read during `lockstep_tf_new` only (Taskflow copies the edges into its own nodes). No C++
//! exception crosses the boundary: `lockstep_tf_new` and `lockstep_tf_run` catch and return a
//! status, and the other three cannot throw (they are `noexcept`, so a throw would end the
//! process rather than unwind into Rust).

use std::ffi::c_void;
use std::ptr::NonNull;

use crate::Error;

unsafe extern "C" {
    fn lockstep_tf_new(
        offsets: *const u32,
        deps: *const u32,
        n: usize,
        workers: usize,
        counting: i32,
    ) -> *mut c_void;
    fn lockstep_tf_run(graph: *mut c_void) -> i32;
    fn lockstep_tf_order(graph: *const c_void, t: usize) -> u64;
    fn lockstep_tf_reset(graph: *mut c_void);
    fn lockstep_tf_free(graph: *mut c_void);
}

/// The owner of one `Graph*` of `graph.cpp`.
pub(crate) struct Graph(NonNull<c_void>);

impl Graph {
    /// Builds the graph; the caller has checked `offsets` and `deps` (`check_csr`).
    pub(crate) fn new(
        offsets: &[u32],
        deps: &[u32],
        workers: usize,
        counting: bool,
    ) -> Result<Self, Error> {
        // SAFETY: `check_csr` made `offsets` n + 1 monotone entries ending at `deps.len()`
        // and every `deps` entry a task index below n, which is all `lockstep_tf_new` reads
        // (offsets[0..=n], deps[offsets[t]..offsets[t + 1]], tasks[deps[e]]); both slices
        // outlive the call and are not kept.
        let raw = unsafe {
            lockstep_tf_new(
                offsets.as_ptr(),
                deps.as_ptr(),
                offsets.len() - 1,
                workers,
                i32::from(counting),
            )
        };
        NonNull::new(raw)
            .map(Graph)
            .ok_or(Error::Threw("building the graph"))
    }

    /// One whole run, waited for.
    pub(crate) fn run(&mut self) -> Result<(), Error> {
        // SAFETY: `self.0` is the live graph this owner holds (protocol above); `&mut self`
        // makes this the only call on it.
        unsafe { lockstep_tf_reset(self.0.as_ptr()) };
        // SAFETY: as above.
        match unsafe { lockstep_tf_run(self.0.as_ptr()) } {
            0 => Ok(()),
            _ => Err(Error::Threw("running the graph")),
        }
    }

    /// The recorded position of task `t` (0 if none).
    pub(crate) fn order(&self, t: usize) -> u64 {
        // SAFETY: `self.0` is live; the call only reads, and no `run` can overlap it (that
        // needs `&mut self`). `t` out of range is answered with 0 by the C++ side.
        unsafe { lockstep_tf_order(self.0.as_ptr(), t) }
    }
}

// SAFETY: a `tf::Executor` and a `tf::Taskflow` have no affinity to the thread that made
// or calls them (Taskflow 4 keeps its workers per executor and no state in the caller's
// thread-locals), so the owner may move to another thread. Shared references only reach
// `lockstep_tf_order`, which reads the record that the last `run` finished writing (its
// `wait` returned after every task), and `run` and `Drop` need the owner exclusively.
unsafe impl Send for Graph {}
// SAFETY: see `Send` above: through `&Graph` only reads happen.
unsafe impl Sync for Graph {}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `lockstep_tf_new`, is owned here alone and is freed
        // once; no run is in progress (`run` waits for its end before it returns).
        unsafe { lockstep_tf_free(self.0.as_ptr()) }
    }
}
