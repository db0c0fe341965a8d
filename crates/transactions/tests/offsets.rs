//! A fenced instance's TxnOffsetCommit, held up behind another client's commit to the same
//! group while a new instance fences it, aborts its transaction and opens one of its own: the
//! zombie's offsets must not land in its successor's transaction.
//!
//! Nothing is timed: the futures are polled by hand, so each interleaving is the one written.

mod support;

use minibroker_storage::sim::SimStorage;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::atomic::Ordering;
use std::task::Poll;
use support::{Node, open};

/// Polls `future` once: whether it finished.
async fn poll_once<F: Future>(future: Pin<&mut F>) -> bool {
    let mut future = future;
    poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx).is_ready())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombies_offsets_held_up_through_a_fence_are_refused_not_committed_by_its_successor() {
    let storage = SimStorage::new();
    let Node {
        groups, service, ..
    } = open(&storage);
    let (producer_id, zombie_epoch) = service.init_producer("app", None, 60_000).await.unwrap();
    service
        .add_offsets(
            ("app", producer_id, zombie_epoch),
            "g",
            service.open_connection(),
        )
        .await
        .unwrap();

    // Another client's commit to the group holds its writer while its file is synced slowly.
    storage.faults.sync_micros.store(300_000, Ordering::Relaxed);
    let mut other = pin!(groups.commit("g", -1, "", vec![("in".into(), 1, 5, None)]));
    assert!(
        !poll_once(other.as_mut()).await,
        "the other commit waits for its sync"
    );
    // The zombie's commit passes its first check and waits for the writer.
    let offsets = vec![("in".into(), 0, 1000, None)];
    let member = (-1, "");
    let mut zombie =
        pin!(service.commit_offsets(("app", producer_id, zombie_epoch), "g", member, offsets));
    assert!(
        !poll_once(zombie.as_mut()).await,
        "the zombie waits for the writer"
    );
    storage.faults.sync_micros.store(0, Ordering::Relaxed);

    // A new instance fences it (its transaction aborted) and opens a transaction of its own,
    // with the group and no offsets.
    let (same_id, epoch) = service.init_producer("app", None, 60_000).await.unwrap();
    assert_eq!(same_id, producer_id);
    assert!(epoch > zombie_epoch);
    let via = service.open_connection();
    service
        .add_offsets(("app", producer_id, epoch), "g", via)
        .await
        .unwrap();

    other.await.unwrap();
    let refused = zombie.await;
    assert!(
        refused.is_err(),
        "the zombie's offsets were taken: {refused:?}"
    );
    service
        .end(("app", producer_id, epoch), (true, false), via)
        .await
        .unwrap();
    let committed = groups.committed("g", None);
    assert!(
        committed
            .iter()
            .all(
                |((topic, partition), offset)| (topic.as_str(), *partition) != ("in", 0)
                    || offset.offset != 1000
            ),
        "{committed:?}"
    );
    assert!(!groups.has_pending("g", &("in".into(), 0)));
}
