//! Sequential specifications of Lockstep's concurrent objects, for [`crate::lin`].
//!
//! Each module gives the operation and result types, the [`crate::lin::SequentialSpec`]
//! implementation, and a function that applies one operation to the production object, so a
//! test records `(op, production result)` pairs and checks them against the model.
//!
//! - [`dag`]: the scheduler (`lockstep_dag::TaskScheduler`) against its full sequential model
//!   `lockstep_models::dag::SchedulerModel`;
//! - [`pool`]: the pool (`lockstep_pool::Pool`) as its clients see it: a lite abstraction of
//!   `lockstep_models::pool::PoolModel` without queues or workers (submit, shutdown, cancel,
//!   join, task runs, children, termination);
//! - [`deque`]: one work-stealing deque with its owner's second deque (push, pop, steal,
//!   batch steal), the queue rules of `PoolModel`.

pub mod dag;
pub mod deque;
pub mod pool;
