//! The cluster's tables in PostgreSQL, in their own schema (`minibroker`), and their version.
//!
//! Every broker migrates the database when it starts, so the first broker of a new version
//! brings the schema up to it. The steps are append-only: step `n` takes the schema from
//! version `n` to `n + 1` and is never changed once released, so a database made by any older
//! broker is brought forward by the same statements a new one runs. The whole migration is one
//! transaction under an advisory lock, so brokers starting together migrate once, one after the
//! other, and a failed migration leaves the schema as it was. A database whose schema is newer
//! than the broker knows is refused, never read: an older broker could misread what a newer one
//! wrote.

use thiserror::Error;

/// The statements that take the schema from version `n` to `n + 1`, for each `n` from 0.
const STEPS: &[&str] = &[
    // 1: the brokers of the cluster, each with its lease (kept alive by its heartbeat; a broker
    // whose lease has run out is not a member).
    "CREATE TABLE minibroker.brokers (
        node_id integer PRIMARY KEY,
        kafka_host text NOT NULL,
        kafka_port integer NOT NULL CHECK (kafka_port BETWEEN 0 AND 65535),
        lease_expires timestamptz NOT NULL,
        registered timestamptz NOT NULL DEFAULT now()
    )",
    // 2: each broker's run (a random id chosen at start), so a second broker started with a
    // node id that a live one holds is refused; topics and their partitions, each partition's producer state and batches, and the
    // producer ids. A partition's row is the lock every write to it takes; its high watermark
    // is where the next batch goes. A producer's row is the rule's entry (`crates/state`): its
    // epoch and its last batches (at most 5) newest first, as parallel arrays. Batches are
    // keyed by their last offset, so a read from an offset finds its batch with the index.
    "ALTER TABLE minibroker.brokers ADD COLUMN run_id text NOT NULL DEFAULT '';
    CREATE TABLE minibroker.topics (
        topic_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        name text NOT NULL UNIQUE,
        partitions integer NOT NULL CHECK (partitions > 0),
        created timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE minibroker.partitions (
        topic_id bigint NOT NULL REFERENCES minibroker.topics ON DELETE CASCADE,
        partition integer NOT NULL CHECK (partition >= 0),
        log_start_offset bigint NOT NULL DEFAULT 0,
        high_watermark bigint NOT NULL DEFAULT 0,
        PRIMARY KEY (topic_id, partition)
    );
    CREATE TABLE minibroker.producer_states (
        topic_id bigint NOT NULL,
        partition integer NOT NULL,
        producer_id bigint NOT NULL CHECK (producer_id >= 0),
        epoch smallint NOT NULL CHECK (epoch >= 0),
        last_timestamp bigint NOT NULL,
        in_transaction boolean NOT NULL,
        first_sequences integer[] NOT NULL,
        last_sequences integer[] NOT NULL,
        base_offsets bigint[] NOT NULL,
        PRIMARY KEY (topic_id, partition, producer_id),
        FOREIGN KEY (topic_id, partition) REFERENCES minibroker.partitions ON DELETE CASCADE
    );
    CREATE TABLE minibroker.batches (
        topic_id bigint NOT NULL,
        partition integer NOT NULL,
        last_offset bigint NOT NULL,
        base_offset bigint NOT NULL,
        bytes bytea NOT NULL,
        PRIMARY KEY (topic_id, partition, last_offset),
        FOREIGN KEY (topic_id, partition) REFERENCES minibroker.partitions ON DELETE CASCADE
    );
    CREATE SEQUENCE minibroker.producer_ids AS bigint MINVALUE 0 START 0",
    // 3: what else every broker shares. A topic's own settings, as `name=value` items (Kafka's
    // names, checked and written as a broker writes them). Each batch's newest timestamp, for
    // retention by age and lookups by time: written by the broker that stores the batch, and
    // read here from the header (bytes 35 to 43) of the batches stored before.
    // Which principal each producer id was issued to, so that with authorisation on only its
    // owner writes with it, on any broker.
    "ALTER TABLE minibroker.topics ADD COLUMN settings text[] NOT NULL DEFAULT '{}';
    ALTER TABLE minibroker.batches ADD COLUMN max_timestamp bigint;
    UPDATE minibroker.batches
        SET max_timestamp = ('x' || encode(substring(bytes FROM 36 FOR 8), 'hex'))::bit(64)::bigint;
    ALTER TABLE minibroker.batches ALTER COLUMN max_timestamp SET NOT NULL;
    CREATE TABLE minibroker.producer_owners (
        producer_id bigint PRIMARY KEY CHECK (producer_id >= 0),
        principal text NOT NULL,
        issued timestamptz NOT NULL DEFAULT now()
    )",
    // 4: a version on each producer's row, a new random one at every write, so a broker may
    // judge a window against the rows it wrote last and have the server check they are still
    // those (`minibroker.expect_window`, under the partitions' locks). A writer that does not
    // set it (a broker of version 3 still running) gets one from the trigger, so its writes
    // are seen as changes too.
    // Batches and producers' rows no longer name their partition's row by foreign key: every
    // window writes them with that row locked, having read it, so the check the key ran for
    // each row only doubled the cost of storing a window. Nothing deletes a partition in a
    // cluster; whatever comes to delete one deletes its batches and producers' rows with it.
    "ALTER TABLE minibroker.batches DROP CONSTRAINT batches_topic_id_partition_fkey;
    ALTER TABLE minibroker.producer_states
        DROP CONSTRAINT producer_states_topic_id_partition_fkey;
    ALTER TABLE minibroker.producer_states
        ADD COLUMN version bigint NOT NULL DEFAULT (random() * 9e18)::bigint;
    CREATE FUNCTION minibroker.new_producer_version() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.version := (random() * 9e18)::bigint;
        RETURN NEW;
    END $$;
    CREATE TRIGGER producer_state_changes BEFORE UPDATE ON minibroker.producer_states
        FOR EACH ROW WHEN (NEW.version = OLD.version)
        EXECUTE FUNCTION minibroker.new_producer_version();
    CREATE FUNCTION minibroker.expect_window(partitions_found bigint, partitions bigint,
                                             producers_found bigint, producers bigint)
        RETURNS boolean LANGUAGE plpgsql AS $$
    BEGIN
        IF partitions_found <> partitions OR producers_found <> producers THEN
            RAISE EXCEPTION 'the window was judged against producer rows that have changed'
                USING ERRCODE = 'MB001';
        END IF;
        RETURN true;
    END $$",
    // 5: coordinators. A consumer group (key type 0) or a transactional id (1) is coordinated
    // by the broker holding its lease; the lease's epoch moves on each time another run (or
    // the same run after the lease ran out) takes it, so a write made under an older tenure is
    // told apart from the holder's. Every coordinator's write checks, in its own transaction,
    // that its run still holds the lease at the epoch it took it (`minibroker.hold_lease`,
    // SQLSTATE MB002): a broker paused past its lease can change nothing.
    // A group's row is its last saved generation, with its members' ids (an offset commit by
    // a member is checked against them, SQLSTATE MB003), its state and protocol type (for
    // ListGroups through any broker) and its membership as the group coordinator encodes it
    // (for DescribeGroups). Its committed offsets are rows of their own. Every write of a
    // group stamps its row with when it was last active, so that retention
    // (`minibroker.expire_idle_groups`) can never delete a group a write is being made to: the
    // write holds the row, and the deletion, waiting for it, sees the new stamp.
    "CREATE TABLE minibroker.coordinator_leases (
        key_type smallint NOT NULL CHECK (key_type IN (0, 1)),
        key text NOT NULL,
        node_id integer NOT NULL,
        run_id text NOT NULL,
        epoch bigint NOT NULL,
        expires timestamptz NOT NULL,
        PRIMARY KEY (key_type, key)
    );
    CREATE INDEX coordinator_leases_by_run ON minibroker.coordinator_leases (run_id);
    CREATE TABLE minibroker.groups (
        group_id text PRIMARY KEY,
        generation integer NOT NULL DEFAULT 0,
        members text[] NOT NULL DEFAULT '{}',
        state text NOT NULL DEFAULT 'Empty',
        protocol_type text NOT NULL DEFAULT '',
        membership bytea,
        last_active_ms bigint NOT NULL DEFAULT 0
    );
    CREATE TABLE minibroker.group_offsets (
        group_id text NOT NULL REFERENCES minibroker.groups ON DELETE CASCADE,
        topic text NOT NULL,
        partition integer NOT NULL,
        committed_offset bigint NOT NULL,
        metadata text,
        commit_ms bigint NOT NULL,
        PRIMARY KEY (group_id, topic, partition)
    );
    CREATE FUNCTION minibroker.hold_lease(wanted_type smallint, wanted_key text, run text,
                                          held_epoch bigint)
        RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM 1 FROM minibroker.coordinator_leases
            WHERE key_type = wanted_type AND key = wanted_key AND run_id = run
              AND epoch = held_epoch AND expires > clock_timestamp()
            FOR SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'this broker no longer holds the lease of %', wanted_key
                USING ERRCODE = 'MB002';
        END IF;
    END $$;
    CREATE FUNCTION minibroker.claim_lease(wanted_type smallint, wanted_key text, node integer,
                                           run text, lease_ms float8)
        RETURNS bigint LANGUAGE plpgsql AS $$
    DECLARE
        held_epoch bigint;
    BEGIN
        INSERT INTO minibroker.coordinator_leases AS held
                (key_type, key, node_id, run_id, epoch, expires)
            VALUES (wanted_type, wanted_key, node, run, 1,
                    clock_timestamp() + lease_ms * interval '1 millisecond')
            ON CONFLICT (key_type, key) DO UPDATE SET
                node_id = EXCLUDED.node_id,
                run_id = EXCLUDED.run_id,
                expires = EXCLUDED.expires,
                epoch = CASE WHEN held.run_id = EXCLUDED.run_id
                                  AND held.expires > clock_timestamp()
                             THEN held.epoch ELSE held.epoch + 1 END
            WHERE held.expires <= clock_timestamp() OR held.run_id = EXCLUDED.run_id
            RETURNING epoch INTO held_epoch;
        RETURN held_epoch;
    END $$;
    CREATE FUNCTION minibroker.claim_group(wanted_group text, node integer, run text,
                                           lease_ms float8, known_epoch bigint,
                                           OUT held_epoch bigint, OUT generation integer)
        LANGUAGE plpgsql AS $$
    BEGIN
        held_epoch := minibroker.claim_lease(0::smallint, wanted_group, node, run, lease_ms);
        IF held_epoch IS NULL THEN
            RETURN;
        END IF;
        IF held_epoch <> known_epoch THEN
            -- A new tenure: the members of the last one must join again.
            UPDATE minibroker.groups g
                SET generation = g.generation + 1, members = '{}', state = 'Empty',
                    membership = NULL, last_active_ms = minibroker.now_ms()
                WHERE g.group_id = wanted_group;
        END IF;
        SELECT g.generation INTO generation FROM minibroker.groups g
            WHERE g.group_id = wanted_group;
        generation := coalesce(generation, 0);
    END $$;
    CREATE FUNCTION minibroker.now_ms() RETURNS bigint LANGUAGE sql AS $$
        SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint
    $$;
    CREATE FUNCTION minibroker.expire_idle_groups(retention_ms bigint) RETURNS bigint
        LANGUAGE plpgsql AS $$
    DECLARE
        idle_before bigint := minibroker.now_ms() - retention_ms;
        expired bigint;
    BEGIN
        -- Groups with no members, nothing waiting in a transaction, and no write for
        -- `retention_ms` go with their offsets. A write racing this holds the group's row and
        -- stamps it: the deletion waits for it, then sees the new stamp and leaves the group.
        DELETE FROM minibroker.groups g
            WHERE cardinality(g.members) = 0 AND g.last_active_ms < idle_before
              AND NOT EXISTS (SELECT 1 FROM minibroker.group_pending_offsets p
                              WHERE p.group_id = g.group_id);
        GET DIAGNOSTICS expired = ROW_COUNT;
        RETURN expired;
    END $$;
    CREATE FUNCTION minibroker.touch_group(wanted_group text, active_ms bigint)
        RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO minibroker.groups AS g (group_id, last_active_ms)
            VALUES (wanted_group, active_ms)
            ON CONFLICT (group_id) DO UPDATE
                SET last_active_ms = greatest(g.last_active_ms, EXCLUDED.last_active_ms);
    END $$;
    CREATE FUNCTION minibroker.check_member(wanted_group text, member_generation integer,
                                            member text)
        RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        IF member_generation IS NOT NULL THEN
            PERFORM 1 FROM minibroker.groups g
                WHERE g.group_id = wanted_group AND g.generation = member_generation
                  AND member = ANY(g.members);
            IF NOT FOUND THEN
                RAISE EXCEPTION 'member % of generation % is not the group''s', member,
                                member_generation USING ERRCODE = 'MB003';
            END IF;
        END IF;
    END $$;
    CREATE FUNCTION minibroker.commit_group_offsets(
            wanted_group text, run text, held_epoch bigint, member_generation integer,
            member text, topics text[], partitions integer[], offsets bigint[],
            metadata text[], commit_ms bigint)
        RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM minibroker.hold_lease(0::smallint, wanted_group, run, held_epoch);
        PERFORM minibroker.check_member(wanted_group, member_generation, member);
        PERFORM minibroker.touch_group(wanted_group, commit_ms);
        INSERT INTO minibroker.group_offsets AS o
                (group_id, topic, partition, committed_offset, metadata, commit_ms)
            SELECT wanted_group, t, p, c, m, commit_ms
            FROM unnest(topics, partitions, offsets, metadata) AS given(t, p, c, m)
            ON CONFLICT (group_id, topic, partition) DO UPDATE SET
                committed_offset = EXCLUDED.committed_offset,
                metadata = EXCLUDED.metadata,
                commit_ms = EXCLUDED.commit_ms;
    END $$;
    CREATE FUNCTION minibroker.save_group(wanted_group text, run text, held_epoch bigint,
                                          new_generation integer, new_members text[],
                                          new_state text, new_protocol_type text,
                                          new_membership bytea)
        RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM minibroker.hold_lease(0::smallint, wanted_group, run, held_epoch);
        INSERT INTO minibroker.groups AS g
                (group_id, generation, members, state, protocol_type, membership,
                 last_active_ms)
            VALUES (wanted_group, new_generation, new_members, new_state, new_protocol_type,
                    new_membership, minibroker.now_ms())
            ON CONFLICT (group_id) DO UPDATE SET
                generation = EXCLUDED.generation,
                members = EXCLUDED.members,
                state = EXCLUDED.state,
                protocol_type = EXCLUDED.protocol_type,
                membership = EXCLUDED.membership,
                last_active_ms = greatest(g.last_active_ms, EXCLUDED.last_active_ms);
    END $$;
    CREATE FUNCTION minibroker.delete_group_offsets(wanted_group text, run text,
                                                    held_epoch bigint, topics text[],
                                                    partitions integer[])
        RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM minibroker.hold_lease(0::smallint, wanted_group, run, held_epoch);
        DELETE FROM minibroker.group_offsets o
            USING unnest(topics, partitions) AS given(t, p)
            WHERE o.group_id = wanted_group AND o.topic = given.t AND o.partition = given.p;
    END $$;
    CREATE FUNCTION minibroker.remove_group(wanted_group text, run text, held_epoch bigint)
        RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM minibroker.hold_lease(0::smallint, wanted_group, run, held_epoch);
        DELETE FROM minibroker.groups WHERE group_id = wanted_group;
    END $$",
    // 6: transactions. Each transactional id's state is one row: its producer id, epoch and
    // state as columns (every change a compare-and-set on them, under the id's lease,
    // `minibroker.save_transaction`, SQLSTATE MB004 when they are not what the coordinator
    // read), the groups it commits offsets of, and the transaction coordinator's whole record
    // of it. The partitions an ongoing transaction added take its producer's transactional
    // batches (a window checks them under the partition's lock, and notes where the first one
    // went: what holds the partition's last stable offset back); the offsets it commits wait
    // in `group_pending_offsets`. An aborted transaction's range in each partition is kept,
    // for read_committed reads of what a broker's copy no longer holds. `minibroker.end_transaction` ends one in a single database
    // transaction: the state compared and set, a COMMIT or ABORT marker at each partition's
    // end (unless a newer epoch of the producer ended it there), the producer's rows closed,
    // its partitions let go, and its pending offsets made the groups' or dropped.
    "CREATE TABLE minibroker.transactions (
        transactional_id text PRIMARY KEY,
        producer_id bigint NOT NULL,
        epoch smallint NOT NULL,
        state text NOT NULL,
        groups text[] NOT NULL DEFAULT '{}',
        timeout_ms bigint NOT NULL,
        started_ms bigint,
        record bytea NOT NULL,
        updated timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE INDEX transactions_by_producer ON minibroker.transactions (producer_id);
    CREATE TABLE minibroker.transaction_partitions (
        topic_id bigint NOT NULL,
        partition integer NOT NULL,
        producer_id bigint NOT NULL,
        epoch smallint NOT NULL,
        first_offset bigint,
        PRIMARY KEY (topic_id, partition, producer_id)
    );
    CREATE TABLE minibroker.aborted_transactions (
        topic_id bigint NOT NULL,
        partition integer NOT NULL,
        producer_id bigint NOT NULL,
        first_offset bigint NOT NULL,
        last_offset bigint NOT NULL,
        PRIMARY KEY (topic_id, partition, last_offset)
    );
    CREATE INDEX transaction_partitions_by_producer
        ON minibroker.transaction_partitions (producer_id);
    CREATE TABLE minibroker.group_pending_offsets (
        group_id text NOT NULL,
        producer_id bigint NOT NULL,
        topic text NOT NULL,
        partition integer NOT NULL,
        committed_offset bigint NOT NULL,
        metadata text,
        commit_ms bigint NOT NULL,
        PRIMARY KEY (group_id, producer_id, topic, partition)
    );
    CREATE INDEX group_pending_offsets_by_producer
        ON minibroker.group_pending_offsets (producer_id);
    CREATE FUNCTION minibroker.swap_transaction(wanted_id text, old_producer bigint,
                                                old_epoch smallint, old_state text,
                                                new_producer bigint, new_epoch smallint,
                                                new_state text, new_groups text[],
                                                new_timeout bigint, new_started bigint,
                                                new_record bytea)
        RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        IF old_producer IS NULL THEN
            INSERT INTO minibroker.transactions (transactional_id, producer_id, epoch, state,
                                                 groups, timeout_ms, started_ms, record)
                VALUES (wanted_id, new_producer, new_epoch, new_state, new_groups, new_timeout,
                        new_started, new_record)
                ON CONFLICT (transactional_id) DO NOTHING;
        ELSIF new_state = 'Dead' THEN
            -- A forgotten id goes.
            DELETE FROM minibroker.transactions
                WHERE transactional_id = wanted_id AND producer_id = old_producer
                  AND epoch = old_epoch AND state = old_state;
        ELSE
            UPDATE minibroker.transactions SET
                    producer_id = new_producer, epoch = new_epoch, state = new_state,
                    groups = new_groups, timeout_ms = new_timeout, started_ms = new_started,
                    record = new_record, updated = clock_timestamp()
                WHERE transactional_id = wanted_id AND producer_id = old_producer
                  AND epoch = old_epoch AND state = old_state;
        END IF;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'transactional id % changed since it was read', wanted_id
                USING ERRCODE = 'MB004';
        END IF;
    END $$;
    CREATE FUNCTION minibroker.save_transaction(
            wanted_id text, run text, held_epoch bigint, old_producer bigint,
            old_epoch smallint, old_state text, new_producer bigint, new_epoch smallint,
            new_state text, new_groups text[], new_timeout bigint, new_started bigint,
            new_record bytea, added_topics text[], added_partitions integer[])
        RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM minibroker.hold_lease(1::smallint, wanted_id, run, held_epoch);
        PERFORM minibroker.swap_transaction(wanted_id, old_producer, old_epoch, old_state,
                                            new_producer, new_epoch, new_state, new_groups,
                                            new_timeout, new_started, new_record);
        INSERT INTO minibroker.transaction_partitions (topic_id, partition, producer_id, epoch)
            SELECT t.topic_id, a.p, new_producer, new_epoch
            FROM unnest(added_topics, added_partitions) AS a(name, p)
            JOIN minibroker.topics t ON t.name = a.name
            ON CONFLICT (topic_id, partition, producer_id) DO UPDATE SET
                epoch = EXCLUDED.epoch,
                first_offset = CASE WHEN transaction_partitions.epoch = EXCLUDED.epoch
                                    THEN transaction_partitions.first_offset END;
    END $$;
    CREATE FUNCTION minibroker.end_transaction(
            wanted_id text, run text, held_epoch bigint, old_producer bigint,
            old_epoch smallint, old_state text, new_producer bigint, new_epoch smallint,
            new_state text, new_timeout bigint, new_record bytea, marker_producer bigint,
            marker_epoch smallint,
            commit boolean, marker_topics text[], marker_partitions integer[],
            markers bytea[], marker_time bigint)
        RETURNS integer LANGUAGE plpgsql AS $$
    DECLARE
        target record;
        end_offset bigint;
        current_epoch smallint;
        written integer := 0;
    BEGIN
        PERFORM minibroker.hold_lease(1::smallint, wanted_id, run, held_epoch);
        PERFORM minibroker.swap_transaction(wanted_id, old_producer, old_epoch, old_state,
                                            new_producer, new_epoch, new_state, '{}',
                                            new_timeout, NULL, new_record);
        FOR target IN
            SELECT t.topic_id, m.p AS partition, m.bytes
            FROM unnest(marker_topics, marker_partitions, markers) AS m(name, p, bytes)
            JOIN minibroker.topics t ON t.name = m.name
            ORDER BY t.topic_id, m.p
        LOOP
            SELECT high_watermark INTO end_offset FROM minibroker.partitions
                WHERE topic_id = target.topic_id AND partition = target.partition
                FOR UPDATE;
            CONTINUE WHEN NOT FOUND;
            SELECT epoch INTO current_epoch FROM minibroker.producer_states
                WHERE topic_id = target.topic_id AND partition = target.partition
                  AND producer_id = marker_producer
                FOR UPDATE;
            -- A newer epoch of the producer ended its transaction here already.
            CONTINUE WHEN FOUND AND current_epoch > marker_epoch;
            INSERT INTO minibroker.batches
                    (topic_id, partition, last_offset, base_offset, bytes, max_timestamp)
                VALUES (target.topic_id, target.partition, end_offset, end_offset,
                        overlay(target.bytes PLACING int8send(end_offset) FROM 1 FOR 8),
                        marker_time);
            UPDATE minibroker.producer_states SET
                    epoch = marker_epoch,
                    first_sequences = CASE WHEN marker_epoch > epoch THEN '{}'
                                           ELSE first_sequences END,
                    last_sequences = CASE WHEN marker_epoch > epoch THEN '{}'
                                          ELSE last_sequences END,
                    base_offsets = CASE WHEN marker_epoch > epoch THEN '{}'
                                        ELSE base_offsets END,
                    in_transaction = false,
                    last_timestamp = greatest(last_timestamp, marker_time),
                    version = (random() * 9e18)::bigint
                WHERE topic_id = target.topic_id AND partition = target.partition
                  AND producer_id = marker_producer;
            UPDATE minibroker.partitions SET high_watermark = end_offset + 1
                WHERE topic_id = target.topic_id AND partition = target.partition;
            IF NOT commit THEN
                INSERT INTO minibroker.aborted_transactions
                        (topic_id, partition, producer_id, first_offset, last_offset)
                    SELECT tp.topic_id, tp.partition, tp.producer_id, tp.first_offset, end_offset
                    FROM minibroker.transaction_partitions tp
                    WHERE tp.topic_id = target.topic_id AND tp.partition = target.partition
                      AND tp.producer_id = marker_producer AND tp.first_offset IS NOT NULL;
            END IF;
            written := written + 1;
        END LOOP;
        DELETE FROM minibroker.transaction_partitions
            WHERE producer_id = marker_producer AND epoch <= marker_epoch;
        IF commit THEN
            PERFORM minibroker.touch_group(pending.group_id, minibroker.now_ms())
                FROM (SELECT DISTINCT group_id FROM minibroker.group_pending_offsets
                      WHERE producer_id = marker_producer) pending;
            INSERT INTO minibroker.group_offsets
                    (group_id, topic, partition, committed_offset, metadata, commit_ms)
                SELECT group_id, topic, partition, committed_offset, metadata, commit_ms
                FROM minibroker.group_pending_offsets WHERE producer_id = marker_producer
                ON CONFLICT (group_id, topic, partition) DO UPDATE SET
                    committed_offset = EXCLUDED.committed_offset,
                    metadata = EXCLUDED.metadata,
                    commit_ms = EXCLUDED.commit_ms;
        END IF;
        DELETE FROM minibroker.group_pending_offsets WHERE producer_id = marker_producer;
        RETURN written;
    END $$;
    CREATE FUNCTION minibroker.commit_pending_offsets(
            wanted_group text, run text, held_epoch bigint, member_generation integer,
            member text, topics text[], partitions integer[], offsets bigint[],
            metadata text[], commit_ms bigint, wanted_id text, txn_producer bigint,
            txn_epoch smallint)
        RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM minibroker.hold_lease(0::smallint, wanted_group, run, held_epoch);
        PERFORM minibroker.check_member(wanted_group, member_generation, member);
        -- The transaction must be the producer's open one, and have added the group; the row
        -- is held so that its end waits for these offsets, or they for it.
        PERFORM 1 FROM minibroker.transactions t
            WHERE t.transactional_id = wanted_id AND t.producer_id = txn_producer
              AND t.epoch = txn_epoch AND t.state = 'Ongoing'
              AND wanted_group = ANY(t.groups)
            FOR SHARE;
        IF NOT FOUND THEN
            PERFORM 1 FROM minibroker.transactions t
                WHERE t.transactional_id = wanted_id AND t.producer_id = txn_producer
                  AND t.epoch > txn_epoch;
            IF FOUND THEN
                RAISE EXCEPTION 'producer % at epoch % was fenced', txn_producer, txn_epoch
                    USING ERRCODE = 'MB006';
            END IF;
            RAISE EXCEPTION 'no open transaction of producer % at epoch % has added group %',
                            txn_producer, txn_epoch, wanted_group USING ERRCODE = 'MB005';
        END IF;
        PERFORM minibroker.touch_group(wanted_group, commit_ms);
        INSERT INTO minibroker.group_pending_offsets AS o
                (group_id, producer_id, topic, partition, committed_offset, metadata,
                 commit_ms)
            SELECT wanted_group, txn_producer, t, p, c, m, commit_ms
            FROM unnest(topics, partitions, offsets, metadata) AS given(t, p, c, m)
            ON CONFLICT (group_id, producer_id, topic, partition) DO UPDATE SET
                committed_offset = EXCLUDED.committed_offset,
                metadata = EXCLUDED.metadata,
                commit_ms = EXCLUDED.commit_ms;
    END $$",
    // 7: a batch delayed past its transaction's abort (KAFKA-17754). When an ABORT ends a
    // transaction on a partition it added but where none of its batches arrived, one may still
    // be on its way, and at the same epoch it would be taken into the producer's next
    // transaction there. The producer and epoch are kept in `aborted_epochs`, and a window
    // refuses that epoch's transactional batches on the partition until the producer moves to
    // a newer one (as a single broker does). `end_transaction` of step 6 is kept, renamed, and
    // called by the new one between noting those partitions and forgetting the epochs the
    // producer has left.
    "CREATE TABLE minibroker.aborted_epochs (
        topic_id bigint NOT NULL,
        partition integer NOT NULL,
        producer_id bigint NOT NULL,
        epoch smallint NOT NULL,
        PRIMARY KEY (topic_id, partition, producer_id),
        FOREIGN KEY (topic_id, partition) REFERENCES minibroker.partitions ON DELETE CASCADE
    );
    CREATE INDEX aborted_epochs_by_producer ON minibroker.aborted_epochs (producer_id);
    ALTER FUNCTION minibroker.end_transaction(text, text, bigint, bigint, smallint, text,
            bigint, smallint, text, bigint, bytea, bigint, smallint, boolean, text[],
            integer[], bytea[], bigint)
        RENAME TO end_transaction_markers;
    CREATE FUNCTION minibroker.end_transaction(
            wanted_id text, run text, held_epoch bigint, old_producer bigint,
            old_epoch smallint, old_state text, new_producer bigint, new_epoch smallint,
            new_state text, new_timeout bigint, new_record bytea, marker_producer bigint,
            marker_epoch smallint,
            commit boolean, marker_topics text[], marker_partitions integer[],
            markers bytea[], marker_time bigint)
        RETURNS integer LANGUAGE plpgsql AS $$
    DECLARE
        written integer;
    BEGIN
        IF NOT commit THEN
            INSERT INTO minibroker.aborted_epochs AS a (topic_id, partition, producer_id, epoch)
                SELECT tp.topic_id, tp.partition, tp.producer_id, tp.epoch
                FROM unnest(marker_topics, marker_partitions) AS m(name, p)
                JOIN minibroker.topics t ON t.name = m.name
                JOIN minibroker.transaction_partitions tp
                    ON tp.topic_id = t.topic_id AND tp.partition = m.p
                WHERE tp.producer_id = marker_producer AND tp.epoch = marker_epoch
                  AND tp.first_offset IS NULL
                ON CONFLICT (topic_id, partition, producer_id) DO UPDATE SET
                    epoch = greatest(a.epoch, EXCLUDED.epoch);
        END IF;
        written := minibroker.end_transaction_markers(wanted_id, run, held_epoch,
            old_producer, old_epoch, old_state, new_producer, new_epoch, new_state,
            new_timeout, new_record, marker_producer, marker_epoch, commit, marker_topics,
            marker_partitions, markers, marker_time);
        DELETE FROM minibroker.aborted_epochs
            WHERE producer_id = marker_producer AND epoch < marker_epoch;
        RETURN written;
    END $$",
];

/// The version of the schema this broker writes and reads.
#[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
pub const SCHEMA_VERSION: i32 = STEPS.len() as i32;

/// The advisory lock every broker's migration takes: an arbitrary key of this project's
/// (the bytes of "mbschema").
const MIGRATION_LOCK: i64 = 0x6d62_7363_6865_6d61;

/// Why the schema could not be brought to [`SCHEMA_VERSION`].
#[derive(Debug, Error)]
pub enum SchemaError {
    /// The database was migrated by a newer broker.
    #[error(
        "the database's minibroker schema is version {found}, newer than the {known} this broker knows: run a broker of that version or newer"
    )]
    Newer {
        /// The version found.
        found: i32,
        /// The newest this broker knows.
        known: i32,
    },
    /// PostgreSQL refused or could not be reached.
    #[error("migrating the minibroker schema: {0}")]
    Postgres(#[from] tokio_postgres::Error),
}

/// Brings the database's schema to [`SCHEMA_VERSION`]; returns the version it found (0 for a
/// database without one).
///
/// # Errors
/// [`SchemaError::Newer`] for a schema newer than this broker knows (nothing is changed), or
/// PostgreSQL's error (the transaction is rolled back: the schema is as it was).
pub async fn migrate(client: &mut tokio_postgres::Client) -> Result<i32, SchemaError> {
    migrate_to(client, SCHEMA_VERSION).await
}

/// As [`migrate`], stopping at version `target` (at most [`SCHEMA_VERSION`]): how a test makes
/// the database an older broker left, to show a newer one reads it.
///
/// # Errors
/// As [`migrate`]; [`SchemaError::Newer`] also for a `target` past [`SCHEMA_VERSION`].
pub async fn migrate_to(
    client: &mut tokio_postgres::Client,
    target: i32,
) -> Result<i32, SchemaError> {
    if target > SCHEMA_VERSION {
        return Err(SchemaError::Newer {
            found: target,
            known: SCHEMA_VERSION,
        });
    }
    let transaction = client.transaction().await?;
    transaction
        .execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    transaction
        .batch_execute(
            "CREATE SCHEMA IF NOT EXISTS minibroker;
             CREATE TABLE IF NOT EXISTS minibroker.schema_version (
                 only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
                 version integer NOT NULL
             )",
        )
        .await?;
    let found: i32 = transaction
        .query_opt("SELECT version FROM minibroker.schema_version", &[])
        .await?
        .map_or(0, |row| row.get(0));
    if found > SCHEMA_VERSION {
        return Err(SchemaError::Newer {
            found,
            known: SCHEMA_VERSION,
        });
    }
    let steps = usize::try_from(target.max(found)).unwrap_or(0);
    for step in STEPS
        .iter()
        .take(steps)
        .skip(usize::try_from(found).unwrap_or(0))
    {
        transaction.batch_execute(step).await?;
    }
    transaction
        .execute(
            "INSERT INTO minibroker.schema_version (version) VALUES ($1)
             ON CONFLICT (only_row) DO UPDATE SET version = EXCLUDED.version",
            &[&target.max(found)],
        )
        .await?;
    transaction.commit().await?;
    Ok(found)
}
