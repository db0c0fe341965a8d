//! The `range` assignor's rule for one topic: members in the order of their ids, each given a
//! run of consecutive partitions, the first ones one more when the partitions do not divide
//! evenly.

/// Each member (every one of `members`, some perhaps with nothing) and its partitions.
pub(super) fn ranges(members: &[String], partitions: &[i32]) -> Vec<(String, Vec<i32>)> {
    let mut members = members.to_vec();
    members.sort();
    members.dedup();
    let mut partitions = partitions.to_vec();
    partitions.sort_unstable();
    let count = members.len().max(1);
    let (each, extra) = (partitions.len() / count, partitions.len() % count);
    let mut rest = partitions.as_slice();
    members
        .into_iter()
        .enumerate()
        .map(|(i, member)| {
            let (given, left) = rest.split_at(each + usize::from(i < extra));
            rest = left;
            (member, given.to_vec())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_partition_goes_to_exactly_one_member_in_runs() {
        let members = ["b".to_owned(), "a".to_owned(), "c".to_owned()];
        let given = ranges(&members, &[4, 0, 1, 2, 3]);
        assert_eq!(
            given,
            vec![
                ("a".to_owned(), vec![0, 1]),
                ("b".to_owned(), vec![2, 3]),
                ("c".to_owned(), vec![4]),
            ]
        );
        let more_members = ranges(&members, &[0]);
        assert_eq!(more_members[2], ("c".to_owned(), vec![]));
    }
}
