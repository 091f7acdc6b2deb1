-- The PostgreSQL store's schema, version 3 (crates/durable/src/postgres.rs): version 1 plus
-- each task's claim `priority` (SPEC A8, version 2) and, per edge, whether it is `optional`
-- and the dependency version an optional edge missed (SPEC A8 optional dependencies, version
-- 3), with the pools and each task's `pool` (SPEC A8 named concurrency limits, version 3),
-- which `open` adds to an older store (postgres.rs SCHEMA_V2_UPGRADE and
-- SCHEMA_V3_UPGRADE, D.schema-migration).
-- `@S@` is replaced by the store's schema name (a quoted identifier) and `@C@` by its
-- notification channel (a string literal: the schema name) when it is installed.
-- Tables are those of the SQLite store (src/sqlite.rs, SCHEMA_V1 and its upgrades) in
-- PostgreSQL's dialect; the functions are the operations that must cost one round trip
-- (claim, complete, fail, renew, cancel, close). Every function begins by locking the single
-- `lockstep_state` row: that lock is the operation's linearization point (see the module
-- documentation).
--
-- Everything after the line `-- FUNCTIONS` is code, not stored layout, run again by `open` on
-- a store whose recorded `functions` revision (lockstep_meta; absent = 1) is older than
-- postgres.rs FUNCTIONS_REVISION (semantics D.pg-functions-revision): `CREATE OR REPLACE`
-- statements, each preceded by a `DROP FUNCTION IF EXISTS` of the same arguments where
-- revision 4 changed the function's result columns (`CREATE OR REPLACE` cannot change them).
-- PL/pgSQL bodies are resolved when called, so dropping a function that others call is safe
-- inside the transaction that creates it again.

CREATE TABLE @S@.lockstep_meta (
    key   text PRIMARY KEY,
    value bigint NOT NULL
);

CREATE TABLE @S@.lockstep_state (
    one             integer PRIMARY KEY CHECK (one = 1),
    max_concurrency bigint  NOT NULL,
    started         boolean NOT NULL,
    closed          boolean NOT NULL,
    next_seq        bigint  NOT NULL,
    next_epoch      bigint  NOT NULL,
    clock           bigint  NOT NULL
);

CREATE TABLE @S@.tasks (
    id               text    PRIMARY KEY,
    first_seq        bigint  NOT NULL,
    seq              bigint  NOT NULL UNIQUE,
    generation       bigint  NOT NULL,
    state            text    NOT NULL CHECK (state IN ('pending', 'ready', 'running',
                                 'succeeded', 'failed', 'blocked', 'cancelled')),
    remaining        bigint  NOT NULL,
    payload          bytea   NOT NULL,
    error            text,
    cause_task       text,
    cause_generation bigint,
    cause_state      text,
    cancelled_by     text,
    cancel_requested boolean NOT NULL,
    lease_owner      text,
    lease_epoch      bigint,
    lease_expiry     bigint,
    attempts         bigint  NOT NULL,
    updated_at       bigint  NOT NULL,
    priority         bigint  NOT NULL DEFAULT 0,
    -- Schema version 3 (SPEC A8 named concurrency limits): the version's pool, or none.
    pool             text
);
-- The claim's scan: ready versions and running ones (whose lease may have expired), in claim
-- order (highest priority first, then seq).
CREATE INDEX tasks_claimable ON @S@.tasks (priority DESC, seq) WHERE state IN ('ready', 'running');
-- Counting live leases for the concurrency limit.
CREATE INDEX tasks_running ON @S@.tasks (lease_expiry) WHERE state = 'running';
CREATE INDEX tasks_first_seq ON @S@.tasks (first_seq);

CREATE TABLE @S@.edges (
    dependent  text    NOT NULL,
    pos        integer NOT NULL,
    dependency text    NOT NULL,
    waiting    boolean NOT NULL,
    -- Schema version 3 (SPEC A8): an optional edge waits until its dependency is terminal,
    -- whatever it ended as; one whose dependency was lost records that version here (the
    -- dependent's `optional_misses`). A version's edges are its required dependencies, then
    -- its optional ones, by `pos`.
    optional        boolean NOT NULL DEFAULT false,
    miss_generation bigint,
    miss_state      text,
    PRIMARY KEY (dependent, pos)
);
-- The reverse-edge index: who waits on a dependency.
CREATE INDEX edges_dependency ON @S@.edges (dependency, waiting);
-- The recorded optional misses, in each dependent's list order (status and snapshot).
CREATE INDEX edges_missed ON @S@.edges (dependent, pos) WHERE miss_state IS NOT NULL;
-- Counting a pool's running versions (schema version 3).
CREATE INDEX tasks_pool_state ON @S@.tasks (pool, state) WHERE pool IS NOT NULL;

-- Schema version 3: the named concurrency limits (`define_pool`), once per name.
CREATE TABLE @S@.pools (
    name  text   PRIMARY KEY,
    depth bigint NOT NULL
);

-- FUNCTIONS

-- `p_id` is lost (failed, cancelled, or blocked: its row says which). First every pending
-- version waiting on it through a **required** edge and, transitively, theirs is blocked with
-- the cause (one recursive statement over the reverse-edge index). Then every pending version
-- waiting through an **optional** edge on `p_id` or on one of those just blocked records the
-- miss on that edge (the lost version's generation and state: `p_id`'s own, `blocked` for
-- the others), stops waiting on it, and becomes ready when that was its last wait (SPEC A8,
-- docs/semantics.md "Optional dependencies"; the SQLite store's `block_waiters_of`). Returns
-- how many became ready and how many were blocked (the operation's `Effect`). Costs
-- O(lost versions + their reverse edges). Caller holds the state-row lock.
DROP FUNCTION IF EXISTS @S@.block_waiters(text, text, bigint, text, bigint);
CREATE OR REPLACE FUNCTION @S@.block_waiters(p_id text, c_task text, c_generation bigint,
                                  c_state text, p_now bigint,
                                  OUT n_ready bigint, OUT n_blocked bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_lost text[];
BEGIN
    WITH RECURSIVE lost(id) AS (
        SELECT p_id
        UNION
        SELECT e.dependent
          FROM @S@.edges e
          JOIN lost ON e.dependency = lost.id
          JOIN @S@.tasks t ON t.id = e.dependent
         WHERE e.waiting AND NOT e.optional AND t.state = 'pending'
    ), blocked AS (
        UPDATE @S@.tasks t
           SET state = 'blocked', cause_task = c_task, cause_generation = c_generation,
               cause_state = c_state, updated_at = p_now
          FROM lost
         WHERE t.id = lost.id AND t.state = 'pending'
        RETURNING t.id
    )
    SELECT coalesce(array_agg(b.id), '{}') INTO v_lost FROM blocked b;
    n_blocked := cardinality(v_lost);
    -- A new statement, so it sees the versions blocked above as blocked: a version that is
    -- blocked now records no miss (it will never run, and a blocked version lists none).
    v_lost := v_lost || p_id;
    WITH missed AS (
        -- One edge per (dependent, lost version): dependency lists have no duplicates.
        UPDATE @S@.edges e
           SET waiting = false, miss_generation = l.generation, miss_state = l.state
          FROM @S@.tasks l, @S@.tasks t
         WHERE l.id = ANY (v_lost)
           AND e.dependency = l.id AND e.waiting AND e.optional
           AND t.id = e.dependent AND t.state = 'pending'
        RETURNING e.dependent
    ), counted AS (
        SELECT m.dependent, count(*) AS k FROM missed m GROUP BY m.dependent
    ), released AS (
        UPDATE @S@.tasks t
           SET remaining = t.remaining - c.k,
               state = CASE WHEN t.remaining = c.k THEN 'ready' ELSE t.state END,
               updated_at = p_now
          FROM counted c
         WHERE t.id = c.dependent
        RETURNING t.state
    )
    SELECT count(*) FILTER (WHERE r.state = 'ready') INTO n_ready FROM released r;
END $$;

-- The checks shared by complete, fail and renew on the row read (all NULL when the id is
-- unknown): id known, generation current, token not fenced. 'ok' or an error code.
CREATE OR REPLACE FUNCTION @S@.fence_code(r @S@.tasks, p_generation bigint, p_owner text, p_epoch bigint)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN r.id IS NULL THEN 'unknown'
        WHEN r.generation <> p_generation THEN 'stale'
        -- INVARIANT (D.fencing): a claimed version accepts only its latest claim's (owner, epoch).
        WHEN r.lease_epoch IS NOT NULL
             AND (r.lease_epoch <> p_epoch OR r.lease_owner <> p_owner) THEN 'fenced'
        ELSE 'ok'
    END
$$;

-- INVARIANT (D.pg-lost-connection): a claim is one statement (`SELECT * FROM claim(...)`),
-- one transaction: a lost connection leaves it applied whole or not at all. Raises LK001 when
-- closed and LK002 when not started (the caller starts, in Rust, and calls again).
-- After the state-row lock: the count of live leases (none without a limit), then one
-- statement that picks, claims and bumps the counters; each takes its snapshot after the lock
-- was granted, so it sees every write committed before (revision 2, docs/durable.md).
CREATE OR REPLACE FUNCTION @S@.claim(p_owner text, p_now bigint, p_lease bigint, p_max bigint)
RETURNS TABLE (o_id text, o_generation bigint, o_epoch bigint, o_expiry bigint,
               o_attempts bigint, o_cancel_requested boolean, o_payload bytea)
LANGUAGE plpgsql AS $$
DECLARE
    st @S@.lockstep_state;
    v_t bigint;
    v_take bigint;
    v_expiry bigint;
    v_names text[];
    v_room bigint[];
    v_epoch bigint;
    v_i integer;
    r record;
BEGIN
    -- LINEARIZATION POINT (D.pg-serial-writes): every write operation takes this row lock
    -- first, so claims (and all other writes) apply one at a time and the limit below is
    -- exact.
    SELECT * INTO st FROM @S@.lockstep_state WHERE one = 1 FOR UPDATE;
    IF st.closed THEN
        RAISE EXCEPTION 'the scheduler is closed' USING ERRCODE = 'LK001';
    END IF;
    IF NOT st.started THEN
        RAISE EXCEPTION 'not started' USING ERRCODE = 'LK002';
    END IF;
    v_t := greatest(st.clock, p_now);
    v_expiry := least(v_t::numeric + p_lease, 9223372036854775807)::bigint;
    -- At most min(max, limit - live leases); the count is skipped when the store has no
    -- limit (it could never bind). A value, not a subquery of the LIMIT below: the planner
    -- then keeps the index scan of `tasks_claimable` (with a subquery it sorted the table).
    IF st.max_concurrency = 9223372036854775807 THEN
        v_take := greatest(p_max, 0);
    ELSE
        SELECT least(p_max, greatest(st.max_concurrency - count(*), 0)) INTO v_take
          FROM @S@.tasks t WHERE t.state = 'running' AND t.lease_expiry > v_t;
    END IF;
    IF v_take > 0 AND EXISTS (SELECT 1 FROM @S@.pools) THEN
        -- INVARIANT (D.pool-depth): with pools, the candidates are walked in claim order and
        -- each one whose pool has no room left (its depth minus its versions under unexpired
        -- leases, minus what this claim took) is passed over; the walk reads only as far as
        -- it must (a cursor over `tasks_claimable`), and a full pool holds back only its own.
        SELECT coalesce(array_agg(p.name ORDER BY p.name), '{}'),
               coalesce(array_agg(greatest(p.depth - (SELECT count(*) FROM @S@.tasks k
                                                       WHERE k.pool = p.name
                                                         AND k.state = 'running'
                                                         AND k.lease_expiry > v_t), 0)
                                  ORDER BY p.name), '{}')
          INTO v_names, v_room
          FROM @S@.pools p;
        v_epoch := st.next_epoch;
        FOR r IN
            SELECT t.id, t.pool FROM @S@.tasks t
             WHERE t.state = 'ready' OR (t.state = 'running' AND t.lease_expiry <= v_t)
             ORDER BY t.priority DESC, t.seq
               FOR UPDATE SKIP LOCKED
        LOOP
            EXIT WHEN v_epoch - st.next_epoch >= v_take;
            IF r.pool IS NOT NULL THEN
                v_i := array_position(v_names, r.pool);
                IF v_i IS NOT NULL THEN
                    CONTINUE WHEN v_room[v_i] <= 0;
                    v_room[v_i] := v_room[v_i] - 1;
                END IF;
            END IF;
            -- A4 claim-once: ready (or expired running) -> running with a new lease.
            UPDATE @S@.tasks t
               SET state = 'running', lease_owner = p_owner, lease_epoch = v_epoch,
                   lease_expiry = v_expiry, attempts = t.attempts + 1, updated_at = v_t
             WHERE t.id = r.id
            RETURNING t.id, t.generation, t.lease_epoch, t.lease_expiry, t.attempts,
                      t.cancel_requested, t.payload
                 INTO o_id, o_generation, o_epoch, o_expiry, o_attempts, o_cancel_requested,
                      o_payload;
            RETURN NEXT;
            v_epoch := v_epoch + 1;
        END LOOP;
        IF v_t <> st.clock OR v_epoch <> st.next_epoch THEN
            UPDATE @S@.lockstep_state SET clock = v_t, next_epoch = v_epoch WHERE one = 1;
        END IF;
    ELSIF v_take = 1 THEN
        -- One version (a worker with one free slot): `LIMIT 1` is written out, so the plan
        -- PostgreSQL caches for this statement is the index scan of `tasks_claimable` in
        -- claim order whatever the table's statistics (with a parameter as the limit, the
        -- cached generic plan could sort the whole table, and each call would plan anew).
        RETURN QUERY
        WITH pick AS (
            -- INVARIANT (D.priority-order): highest priority first, then submission order.
            SELECT t.id FROM @S@.tasks t
             WHERE t.state = 'ready' OR (t.state = 'running' AND t.lease_expiry <= v_t)
             ORDER BY t.priority DESC, t.seq
             LIMIT 1
               FOR UPDATE SKIP LOCKED
        ), claimed AS (
            UPDATE @S@.tasks t
               SET state = 'running', lease_owner = p_owner, lease_epoch = st.next_epoch,
                   lease_expiry = v_expiry, attempts = t.attempts + 1, updated_at = v_t
              FROM pick p
             WHERE t.id = p.id
            RETURNING t.id, t.generation, t.lease_epoch, t.lease_expiry, t.attempts,
                      t.cancel_requested, t.payload
        ), bump AS (
            UPDATE @S@.lockstep_state
               SET clock = v_t, next_epoch = next_epoch + (SELECT count(*) FROM claimed)
             WHERE one = 1 AND (v_t <> st.clock OR EXISTS (SELECT 1 FROM claimed))
        )
        SELECT * FROM claimed;
    ELSIF v_take > 1 THEN
        RETURN QUERY
        WITH pick AS (
            -- Candidates: ready versions and running ones whose lease expired, highest
            -- priority first, then lowest submission sequence (D.priority-order).
            SELECT t.id, t.seq, t.priority FROM @S@.tasks t
             WHERE t.state = 'ready' OR (t.state = 'running' AND t.lease_expiry <= v_t)
             ORDER BY t.priority DESC, t.seq
             LIMIT v_take
               FOR UPDATE SKIP LOCKED
        ), numbered AS (
            SELECT p.id, st.next_epoch - 1
                         + row_number() OVER (ORDER BY p.priority DESC, p.seq) AS epoch
              FROM pick p
        ), claimed AS (
            -- A4 claim-once: ready (or expired running) -> running with a new lease.
            UPDATE @S@.tasks t
               SET state = 'running', lease_owner = p_owner, lease_epoch = nb.epoch,
                   lease_expiry = v_expiry, attempts = t.attempts + 1, updated_at = v_t
              FROM numbered nb
             WHERE t.id = nb.id
            RETURNING t.id, t.generation, t.lease_epoch, t.lease_expiry, t.attempts,
                      t.cancel_requested, t.payload, t.seq, t.priority
        ), bump AS (
            -- The counters, written only when they change (a claim of nothing at an unchanged
            -- clock writes no row version).
            UPDATE @S@.lockstep_state
               SET clock = v_t, next_epoch = next_epoch + (SELECT count(*) FROM claimed)
             WHERE one = 1 AND (v_t <> st.clock OR EXISTS (SELECT 1 FROM claimed))
        )
        SELECT c.id, c.generation, c.lease_epoch, c.lease_expiry, c.attempts,
               c.cancel_requested, c.payload
          FROM claimed c ORDER BY c.priority DESC, c.seq;
    ELSIF v_t <> st.clock THEN
        UPDATE @S@.lockstep_state SET clock = v_t WHERE one = 1;
    END IF;
END $$;

-- complete / fail: one statement, one transaction. Returns (code, ready, blocked, current
-- generation, lease owner, lease epoch, state): code 'applied' (ready and blocked: the
-- `Effect`; a failure readies the optional waiters it settles, `block_waiters`),
-- 'duplicate', or an error code ('unknown', 'stale', 'fenced', 'conflict') that changed
-- nothing.
-- The usual case (the token is the running version's latest claim) is one statement after
-- the lock: the conditional UPDATE is the fence (as `fence_code`), and a completion
-- releases the waiters in the same statement. Anything else reads the row and answers as
-- `fence_code` says. An applied settlement notifies `@C@` when it made work claimable
-- (semantics D.pg-notify): a dependent became ready, or, in a store with a limit, a slot
-- became free.
DROP FUNCTION IF EXISTS @S@.settle(text, bigint, text, bigint, bigint, boolean, text);
CREATE OR REPLACE FUNCTION @S@.settle(p_id text, p_generation bigint, p_owner text, p_epoch bigint,
                           p_now bigint, p_success boolean, p_error text,
                           OUT code text, OUT n_ready bigint, OUT n_blocked bigint,
                           OUT cur_generation bigint,
                           OUT cur_owner text, OUT cur_epoch bigint, OUT cur_state text)
LANGUAGE plpgsql AS $$
DECLARE
    v_clock bigint;
    v_limit bigint;
    row @S@.tasks;
    v_t bigint;
    v_done bigint;
BEGIN
    SELECT clock, max_concurrency INTO v_clock, v_limit
      FROM @S@.lockstep_state WHERE one = 1 FOR UPDATE;
    v_t := greatest(v_clock, p_now);
    n_ready := 0;
    n_blocked := 0;
    IF p_success THEN
        WITH me AS (
            UPDATE @S@.tasks SET state = 'succeeded', updated_at = v_t
             WHERE id = p_id AND generation = p_generation AND state = 'running'
               AND lease_epoch = p_epoch AND lease_owner = p_owner
            RETURNING id
        ), released AS (
            -- Each pending waiter stops waiting on it (one edge each: dependency lists
            -- have no duplicates), through the reverse-edge index only.
            UPDATE @S@.edges e SET waiting = false
              FROM me, @S@.tasks t
             WHERE e.dependency = me.id AND e.waiting
               AND t.id = e.dependent AND t.state = 'pending'
            RETURNING e.dependent
        ), updated AS (
            UPDATE @S@.tasks t
               SET remaining = t.remaining - 1,
                   state = CASE WHEN t.remaining = 1 THEN 'ready' ELSE t.state END,
                   updated_at = v_t
              FROM released r
             WHERE t.id = r.dependent
            RETURNING t.state
        )
        SELECT (SELECT count(*) FROM me), (SELECT count(*) FROM updated WHERE state = 'ready')
          INTO v_done, n_ready;
    ELSE
        UPDATE @S@.tasks SET state = 'failed', error = p_error, updated_at = v_t
         WHERE id = p_id AND generation = p_generation AND state = 'running'
           AND lease_epoch = p_epoch AND lease_owner = p_owner;
        GET DIAGNOSTICS v_done = ROW_COUNT;
        IF v_done > 0 THEN
            SELECT w.n_ready, w.n_blocked INTO n_ready, n_blocked
              FROM @S@.block_waiters(p_id, p_id, p_generation, 'failed', v_t) w;
        END IF;
    END IF;
    IF v_done > 0 THEN
        code := 'applied';
        cur_generation := p_generation;
        cur_owner := p_owner;
        cur_epoch := p_epoch;
        cur_state := CASE WHEN p_success THEN 'succeeded' ELSE 'failed' END;
        -- INVARIANT (D.pg-notify): work made claimable wakes the listening idle workers (a
        -- failure readies the optional waiters it settles; a settled version of a pool frees
        -- the pool's slot, so the pool's passed-over versions are claimable again, even in a
        -- store without a limit).
        -- (The pool's lookup is a statement of its own: in one condition with the two
        -- others, PostgreSQL planned the whole condition anew at every call.)
        IF n_ready > 0 OR v_limit <> 9223372036854775807 THEN
            PERFORM pg_notify(@C@, '');
        ELSIF EXISTS (SELECT 1 FROM @S@.tasks WHERE id = p_id AND pool IS NOT NULL) THEN
            PERFORM pg_notify(@C@, '');
        END IF;
    ELSE
        SELECT * INTO row FROM @S@.tasks WHERE id = p_id;
        code := @S@.fence_code(row, p_generation, p_owner, p_epoch);
        cur_generation := row.generation;
        cur_owner := row.lease_owner;
        cur_epoch := row.lease_epoch;
        cur_state := row.state;
        IF code <> 'ok' THEN
            RETURN;
        END IF;
        -- Not running (the conditional UPDATE above took every running version the fence
        -- lets through): a duplicate or a conflict.
        IF (p_success AND row.state = 'succeeded') OR (NOT p_success AND row.state = 'failed') THEN
            code := 'duplicate';
        ELSE
            code := 'conflict';
            RETURN;
        END IF;
    END IF;
    IF v_t <> v_clock THEN
        UPDATE @S@.lockstep_state SET clock = v_t WHERE one = 1;
    END IF;
END $$;

-- settle_claim (revision 5; one body since revision 6): the report as `settle`, then, when it
-- was accepted ('applied' or 'duplicate') and the store is not closed, the claim as `claim`
-- for the token's owner, in one statement, one transaction (D.report-and-claim). Every row
-- carries the settlement's columns; the claim's columns (as `claim` returns them) are null on
-- the one row returned when nothing was claimed.
-- Revision 6 writes both halves out in this one PL/pgSQL body instead of calling `settle` and
-- `claim` (whose nested calls cost about a third of the call, docs/durable.md "The fused
-- report"): the state row is locked once, first, and the counters (clock, next_epoch) are
-- written once, at the end. Each half's statements are `settle`'s and `claim`'s own (keep
-- them in step); a failure still calls `block_waiters`.
CREATE OR REPLACE FUNCTION @S@.settle_claim(p_id text, p_generation bigint, p_owner text,
                           p_epoch bigint, p_now bigint, p_success boolean, p_error text,
                           p_lease bigint, p_max bigint)
RETURNS TABLE (code text, n_ready bigint, n_blocked bigint, cur_generation bigint,
               cur_owner text, cur_epoch bigint, cur_state text,
               o_id text, o_generation bigint, o_epoch bigint, o_expiry bigint,
               o_attempts bigint, o_cancel_requested boolean, o_payload bytea)
LANGUAGE plpgsql AS $$
DECLARE
    st @S@.lockstep_state;
    row @S@.tasks;
    v_t bigint;
    v_done bigint;
    v_take bigint;
    v_expiry bigint;
    v_names text[];
    v_room bigint[];
    v_epoch bigint;
    v_i integer;
    v_cand record;
BEGIN
    -- LINEARIZATION POINT (D.pg-serial-writes): the state-row lock comes first, as in every
    -- write; the report and the claim below both run under it, so no other write comes
    -- between them.
    SELECT * INTO st FROM @S@.lockstep_state WHERE one = 1 FOR UPDATE;
    v_t := greatest(st.clock, p_now);
    n_ready := 0;
    n_blocked := 0;
    -- The report, as `settle`.
    IF p_success THEN
        WITH me AS (
            UPDATE @S@.tasks SET state = 'succeeded', updated_at = v_t
             WHERE id = p_id AND generation = p_generation AND state = 'running'
               AND lease_epoch = p_epoch AND lease_owner = p_owner
            RETURNING id
        ), released AS (
            UPDATE @S@.edges e SET waiting = false
              FROM me, @S@.tasks t
             WHERE e.dependency = me.id AND e.waiting
               AND t.id = e.dependent AND t.state = 'pending'
            RETURNING e.dependent
        ), updated AS (
            UPDATE @S@.tasks t
               SET remaining = t.remaining - 1,
                   state = CASE WHEN t.remaining = 1 THEN 'ready' ELSE t.state END,
                   updated_at = v_t
              FROM released r
             WHERE t.id = r.dependent
            RETURNING t.state
        )
        SELECT (SELECT count(*) FROM me), (SELECT count(*) FROM updated WHERE state = 'ready')
          INTO v_done, n_ready;
    ELSE
        UPDATE @S@.tasks SET state = 'failed', error = p_error, updated_at = v_t
         WHERE id = p_id AND generation = p_generation AND state = 'running'
           AND lease_epoch = p_epoch AND lease_owner = p_owner;
        GET DIAGNOSTICS v_done = ROW_COUNT;
        IF v_done > 0 THEN
            SELECT w.n_ready, w.n_blocked INTO n_ready, n_blocked
              FROM @S@.block_waiters(p_id, p_id, p_generation, 'failed', v_t) w;
        END IF;
    END IF;
    IF v_done > 0 THEN
        code := 'applied';
        cur_generation := p_generation;
        cur_owner := p_owner;
        cur_epoch := p_epoch;
        cur_state := CASE WHEN p_success THEN 'succeeded' ELSE 'failed' END;
        -- INVARIANT (D.pg-notify): as in `settle`.
        IF n_ready > 0 OR st.max_concurrency <> 9223372036854775807 THEN
            PERFORM pg_notify(@C@, '');
        ELSIF EXISTS (SELECT 1 FROM @S@.tasks WHERE id = p_id AND pool IS NOT NULL) THEN
            PERFORM pg_notify(@C@, '');
        END IF;
    ELSE
        SELECT * INTO row FROM @S@.tasks WHERE id = p_id;
        code := @S@.fence_code(row, p_generation, p_owner, p_epoch);
        cur_generation := row.generation;
        cur_owner := row.lease_owner;
        cur_epoch := row.lease_epoch;
        cur_state := row.state;
        IF code = 'ok' THEN
            IF (p_success AND row.state = 'succeeded') OR (NOT p_success AND row.state = 'failed') THEN
                code := 'duplicate';
            ELSE
                code := 'conflict';
            END IF;
        END IF;
        IF code <> 'duplicate' THEN
            -- INVARIANT (D.report-and-claim): a refused report changes nothing and claims
            -- nothing.
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    -- INVARIANT (D.report-and-claim): the claim follows the accepted report under the same
    -- lock (it sees the slot the report freed and the dependents it released); a closed
    -- store claims nothing after the report.
    IF st.closed THEN
        IF v_t <> st.clock THEN
            UPDATE @S@.lockstep_state SET clock = v_t WHERE one = 1;
        END IF;
        RETURN NEXT;
        RETURN;
    END IF;
    -- The claim, as `claim` (its comments say why each statement is written so).
    IF NOT st.started THEN
        RAISE EXCEPTION 'not started' USING ERRCODE = 'LK002';
    END IF;
    v_expiry := least(v_t::numeric + p_lease, 9223372036854775807)::bigint;
    IF st.max_concurrency = 9223372036854775807 THEN
        v_take := greatest(p_max, 0);
    ELSE
        SELECT least(p_max, greatest(st.max_concurrency - count(*), 0)) INTO v_take
          FROM @S@.tasks t WHERE t.state = 'running' AND t.lease_expiry > v_t;
    END IF;
    IF v_take > 0 AND EXISTS (SELECT 1 FROM @S@.pools) THEN
        -- INVARIANT (D.pool-depth): as in `claim`.
        SELECT coalesce(array_agg(p.name ORDER BY p.name), '{}'),
               coalesce(array_agg(greatest(p.depth - (SELECT count(*) FROM @S@.tasks k
                                                       WHERE k.pool = p.name
                                                         AND k.state = 'running'
                                                         AND k.lease_expiry > v_t), 0)
                                  ORDER BY p.name), '{}')
          INTO v_names, v_room
          FROM @S@.pools p;
        v_epoch := st.next_epoch;
        FOR v_cand IN
            SELECT t.id, t.pool FROM @S@.tasks t
             WHERE t.state = 'ready' OR (t.state = 'running' AND t.lease_expiry <= v_t)
             ORDER BY t.priority DESC, t.seq
               FOR UPDATE SKIP LOCKED
        LOOP
            EXIT WHEN v_epoch - st.next_epoch >= v_take;
            IF v_cand.pool IS NOT NULL THEN
                v_i := array_position(v_names, v_cand.pool);
                IF v_i IS NOT NULL THEN
                    CONTINUE WHEN v_room[v_i] <= 0;
                    v_room[v_i] := v_room[v_i] - 1;
                END IF;
            END IF;
            UPDATE @S@.tasks t
               SET state = 'running', lease_owner = p_owner, lease_epoch = v_epoch,
                   lease_expiry = v_expiry, attempts = t.attempts + 1, updated_at = v_t
             WHERE t.id = v_cand.id
            RETURNING t.id, t.generation, t.lease_epoch, t.lease_expiry, t.attempts,
                      t.cancel_requested, t.payload
                 INTO o_id, o_generation, o_epoch, o_expiry, o_attempts, o_cancel_requested,
                      o_payload;
            RETURN NEXT;
            v_epoch := v_epoch + 1;
        END LOOP;
        IF v_t <> st.clock OR v_epoch <> st.next_epoch THEN
            UPDATE @S@.lockstep_state SET clock = v_t, next_epoch = v_epoch WHERE one = 1;
        END IF;
        IF v_epoch = st.next_epoch THEN
            RETURN NEXT;
        END IF;
    ELSIF v_take = 1 THEN
        -- The report's clock and the claim's epoch in one write of the state row (`bump`,
        -- against the clock read at the lock).
        RETURN QUERY
        WITH pick AS (
            -- INVARIANT (D.priority-order): highest priority first, then submission order.
            SELECT t.id FROM @S@.tasks t
             WHERE t.state = 'ready' OR (t.state = 'running' AND t.lease_expiry <= v_t)
             ORDER BY t.priority DESC, t.seq
             LIMIT 1
               FOR UPDATE SKIP LOCKED
        ), claimed AS (
            UPDATE @S@.tasks t
               SET state = 'running', lease_owner = p_owner, lease_epoch = st.next_epoch,
                   lease_expiry = v_expiry, attempts = t.attempts + 1, updated_at = v_t
              FROM pick p
             WHERE t.id = p.id
            RETURNING t.id, t.generation, t.lease_epoch, t.lease_expiry, t.attempts,
                      t.cancel_requested, t.payload
        ), bump AS (
            UPDATE @S@.lockstep_state
               SET clock = v_t, next_epoch = next_epoch + (SELECT count(*) FROM claimed)
             WHERE one = 1 AND (v_t <> st.clock OR EXISTS (SELECT 1 FROM claimed))
        )
        SELECT code, n_ready, n_blocked, cur_generation, cur_owner, cur_epoch, cur_state,
               c.id, c.generation, c.lease_epoch, c.lease_expiry, c.attempts,
               c.cancel_requested, c.payload
          FROM claimed c;
        IF NOT FOUND THEN
            RETURN NEXT;
        END IF;
    ELSIF v_take > 1 THEN
        RETURN QUERY
        WITH pick AS (
            SELECT t.id, t.seq, t.priority FROM @S@.tasks t
             WHERE t.state = 'ready' OR (t.state = 'running' AND t.lease_expiry <= v_t)
             ORDER BY t.priority DESC, t.seq
             LIMIT v_take
               FOR UPDATE SKIP LOCKED
        ), numbered AS (
            SELECT p.id, st.next_epoch - 1
                         + row_number() OVER (ORDER BY p.priority DESC, p.seq) AS epoch
              FROM pick p
        ), claimed AS (
            UPDATE @S@.tasks t
               SET state = 'running', lease_owner = p_owner, lease_epoch = nb.epoch,
                   lease_expiry = v_expiry, attempts = t.attempts + 1, updated_at = v_t
              FROM numbered nb
             WHERE t.id = nb.id
            RETURNING t.id, t.generation, t.lease_epoch, t.lease_expiry, t.attempts,
                      t.cancel_requested, t.payload, t.seq, t.priority
        ), bump AS (
            UPDATE @S@.lockstep_state
               SET clock = v_t, next_epoch = next_epoch + (SELECT count(*) FROM claimed)
             WHERE one = 1 AND (v_t <> st.clock OR EXISTS (SELECT 1 FROM claimed))
        )
        SELECT code, n_ready, n_blocked, cur_generation, cur_owner, cur_epoch, cur_state,
               c.id, c.generation, c.lease_epoch, c.lease_expiry, c.attempts,
               c.cancel_requested, c.payload
          FROM claimed c ORDER BY c.priority DESC, c.seq;
        IF NOT FOUND THEN
            RETURN NEXT;
        END IF;
    ELSE
        IF v_t <> st.clock THEN
            UPDATE @S@.lockstep_state SET clock = v_t WHERE one = 1;
        END IF;
        RETURN NEXT;
    END IF;
END $$;

-- renew: one statement. Returns (code, new expiry or the old one, clock, cancel_requested,
-- current generation, lease owner, lease epoch, state).
CREATE OR REPLACE FUNCTION @S@.renew(p_id text, p_generation bigint, p_owner text, p_epoch bigint,
                          p_now bigint, p_lease bigint,
                          OUT code text, OUT expiry bigint, OUT t bigint,
                          OUT cancel_requested boolean, OUT cur_generation bigint,
                          OUT cur_owner text, OUT cur_epoch bigint, OUT cur_state text)
LANGUAGE plpgsql AS $$
DECLARE
    st @S@.lockstep_state;
    row @S@.tasks;
BEGIN
    SELECT * INTO st FROM @S@.lockstep_state WHERE one = 1 FOR UPDATE;
    SELECT * INTO row FROM @S@.tasks WHERE id = p_id;
    code := @S@.fence_code(row, p_generation, p_owner, p_epoch);
    cur_generation := row.generation;
    cur_owner := row.lease_owner;
    cur_epoch := row.lease_epoch;
    cur_state := row.state;
    cancel_requested := row.cancel_requested;
    expiry := row.lease_expiry;
    t := greatest(st.clock, p_now);
    IF code <> 'ok' THEN
        RETURN;
    END IF;
    IF row.state <> 'running' THEN
        code := 'conflict';
        RETURN;
    END IF;
    IF row.lease_expiry <= t THEN
        code := 'expired';
        RETURN;
    END IF;
    expiry := least(t::numeric + p_lease, 9223372036854775807)::bigint;
    UPDATE @S@.tasks SET lease_expiry = expiry, updated_at = t WHERE id = p_id;
    UPDATE @S@.lockstep_state SET clock = t WHERE one = 1;
END $$;

-- cancel: one statement. Returns (code, ready, blocked, state): 'unknown', 'cancelled' (ready
-- and blocked: the `Effect`, `block_waiters`), 'requested' or 'terminal'. A cancellation that
-- readies optional waiters notifies `@C@` (D.pg-notify).
DROP FUNCTION IF EXISTS @S@.cancel(text, bigint);
CREATE OR REPLACE FUNCTION @S@.cancel(p_id text, p_now bigint,
                           OUT code text, OUT n_ready bigint, OUT n_blocked bigint,
                           OUT cur_state text)
LANGUAGE plpgsql AS $$
DECLARE
    st @S@.lockstep_state;
    row @S@.tasks;
    v_t bigint;
BEGIN
    SELECT * INTO st FROM @S@.lockstep_state WHERE one = 1 FOR UPDATE;
    SELECT * INTO row FROM @S@.tasks WHERE id = p_id;
    n_ready := 0;
    n_blocked := 0;
    IF NOT FOUND THEN
        code := 'unknown';
        RETURN;
    END IF;
    cur_state := row.state;
    v_t := greatest(st.clock, p_now);
    IF row.state IN ('pending', 'ready') THEN
        UPDATE @S@.tasks SET state = 'cancelled', cancelled_by = 'user', updated_at = v_t
         WHERE id = p_id;
        SELECT w.n_ready, w.n_blocked INTO n_ready, n_blocked
          FROM @S@.block_waiters(p_id, p_id, row.generation, 'cancelled', v_t) w;
        code := 'cancelled';
        -- INVARIANT (D.pg-notify): optional waiters made ready wake the idle workers.
        IF n_ready > 0 THEN
            PERFORM pg_notify(@C@, '');
        END IF;
    ELSIF row.state = 'running' THEN
        UPDATE @S@.tasks SET cancel_requested = true, updated_at = v_t WHERE id = p_id;
        code := 'requested';
    ELSE
        code := 'terminal';
    END IF;
    UPDATE @S@.lockstep_state SET clock = v_t WHERE one = 1;
END $$;

-- close: one statement. Returns (cancelled, running). Nothing is propagated: every pending
-- version is cancelled with the others, so no waiter is left to block or to record a miss
-- (as in the model, where close records none).
CREATE OR REPLACE FUNCTION @S@.close(p_now bigint, OUT cancelled bigint, OUT running bigint)
LANGUAGE plpgsql AS $$
DECLARE
    st @S@.lockstep_state;
    v_t bigint;
BEGIN
    SELECT * INTO st FROM @S@.lockstep_state WHERE one = 1 FOR UPDATE;
    v_t := greatest(st.clock, p_now);
    cancelled := 0;
    IF NOT st.closed THEN
        UPDATE @S@.tasks SET state = 'cancelled', cancelled_by = 'closed', updated_at = v_t
         WHERE state IN ('pending', 'ready');
        GET DIAGNOSTICS cancelled = ROW_COUNT;
    END IF;
    SELECT count(*) INTO running FROM @S@.tasks WHERE state = 'running';
    UPDATE @S@.lockstep_state SET closed = true, clock = v_t WHERE one = 1;
END $$;
