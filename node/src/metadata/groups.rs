//! Consumer groups and the cooperative assignment of a topic's partitions to their members.
//!
//! A member is a client session (its u128 client id). Invariants, whenever a group has members:
//! every partition of the topic is owned by exactly one member, and owned counts differ by at most
//! one. Group ids and names are unique within the topic.
//!
//! Rebalancing is cooperative (a member keeps what it can) and deterministic (BTreeMap order, ties
//! broken by client id). With `n` partitions and `k` members, `n % k` members may own
//! `n / k + 1` partitions and the rest own `n / k`; the larger quotas go to the members that
//! already own the most, so the fewest partitions move. Each member keeps its lowest partitions
//! up to its quota; its surplus and every unowned partition go to a pool that the members short of
//! their quota draw from in client id order, lowest partition first.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::command::{Identifier, MetadataResult};
use super::error::MetadataError;
use super::limits::Limit;
use super::streams::{validate_name, Topic};
use super::Metadata;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerGroup {
    pub id: u32,
    pub name: String,
    /// Each member's partitions, ascending.
    pub members: BTreeMap<u128, Vec<u32>>,
}

impl ConsumerGroup {
    /// Restores the assignment invariants for `partitions_count` partitions, moving as few
    /// partitions as possible (see the module documentation).
    pub(super) fn rebalance(&mut self, partitions_count: u32) {
        let members_count = self.members.len();
        if members_count == 0 {
            return;
        }
        for partitions in self.members.values_mut() {
            partitions.retain(|partition| *partition < partitions_count);
            partitions.sort_unstable();
        }

        let members_count = u32::try_from(members_count).expect("members are bounded by a u32 limit");
        let floor = partitions_count / members_count;
        let ceiling_quotas = (partitions_count % members_count) as usize;
        let mut by_holdings: Vec<(u128, usize)> =
            self.members.iter().map(|(member, partitions)| (*member, partitions.len())).collect();
        by_holdings.sort_by(|(a, held_a), (b, held_b)| held_b.cmp(held_a).then(a.cmp(b)));
        let quotas: BTreeMap<u128, usize> = by_holdings
            .iter()
            .enumerate()
            .map(|(rank, (member, _))| (*member, floor as usize + usize::from(rank < ceiling_quotas)))
            .collect();

        // The pool is every partition no member keeps: surpluses and partitions nobody held.
        let mut kept = BTreeSet::new();
        for (member, partitions) in self.members.iter_mut() {
            partitions.truncate(quotas[member]);
            kept.extend(partitions.iter().copied());
        }
        let mut pool = (0..partitions_count).filter(|partition| !kept.contains(partition));
        for (member, partitions) in self.members.iter_mut() {
            while partitions.len() < quotas[member] {
                partitions.push(pool.next().expect("quotas add up to the partitions count"));
            }
            partitions.sort_unstable();
        }
        assert!(pool.next().is_none(), "every partition is assigned");
    }

    /// The assignment invariants (see the module documentation).
    pub(super) fn check_assignment(&self, partitions_count: u32) -> Result<(), String> {
        if self.members.is_empty() {
            return Ok(());
        }
        let mut owners = vec![0u32; partitions_count as usize];
        for partitions in self.members.values() {
            for partition in partitions {
                let slot = owners.get_mut(*partition as usize).ok_or("a member owns a missing partition")?;
                *slot += 1;
            }
            if partitions.windows(2).any(|pair| pair[0] >= pair[1]) {
                return Err("a member's partitions are not ascending".into());
            }
        }
        if owners.iter().any(|owners| *owners != 1) {
            return Err("a partition is not owned by exactly one member".into());
        }
        let counts = self.members.values().map(Vec::len);
        let (fewest, most) = (counts.clone().min().unwrap_or(0), counts.max().unwrap_or(0));
        if most - fewest > 1 {
            return Err("owned counts differ by more than one".into());
        }
        Ok(())
    }
}

impl Topic {
    fn resolve_group(&self, stream: u32, group: &Identifier) -> Result<&ConsumerGroup, MetadataError> {
        let found = match group {
            Identifier::Numeric(id) => self.consumer_groups.get(id),
            Identifier::Name(name) => {
                super::validate_identifier(group)?;
                self.consumer_group_by_name(name)
            }
        };
        found.ok_or_else(|| MetadataError::ConsumerGroupNotFound { stream, topic: self.id, group: group.clone() })
    }
}

impl Metadata {
    /// Resolves a consumer group by the ids or names of it, its topic and its stream; returns the
    /// stream, topic and group ids.
    pub fn resolve_consumer_group(
        &self,
        stream: &Identifier,
        topic: &Identifier,
        group: &Identifier,
    ) -> Result<(u32, u32, &ConsumerGroup), MetadataError> {
        let (stream, topic) = self.resolve_topic(stream, topic)?;
        let group = topic.resolve_group(stream.id, group)?;
        Ok((stream.id, topic.id, group))
    }

    pub(super) fn create_consumer_group(
        &mut self,
        actor_id: u32,
        stream: &Identifier,
        topic: &Identifier,
        name: &str,
    ) -> Result<MetadataResult, MetadataError> {
        let actor = self.acting_user(actor_id)?;
        let (stream, topic) = self.resolve_topic(stream, topic)?;
        let (stream_id, topic_id) = (stream.id, topic.id);
        if !actor.permissions.read_topic(stream_id, topic_id) {
            return Err(MetadataError::PermissionDenied(actor_id));
        }
        if !validate_name(name) {
            return Err(MetadataError::InvalidConsumerGroupName);
        }
        if topic.consumer_group_by_name(name).is_some() {
            return Err(MetadataError::ConsumerGroupAlreadyExists {
                stream: stream_id,
                topic: topic_id,
                name: name.to_owned(),
            });
        }
        if topic.consumer_groups.len() >= self.limits.consumer_groups_per_topic_max as usize {
            return Err(MetadataError::LimitReached(Limit::ConsumerGroupsPerTopic));
        }

        let id = super::lowest_free_id(&topic.consumer_groups);
        let group = ConsumerGroup { id, name: name.to_owned(), members: BTreeMap::new() };
        self.topic_mut(stream_id, topic_id).consumer_groups.insert(id, group);
        Ok(MetadataResult::ConsumerGroupCreated { stream: stream_id, topic: topic_id, group: id })
    }

    pub(super) fn delete_consumer_group(
        &mut self,
        actor_id: u32,
        stream: &Identifier,
        topic: &Identifier,
        group: &Identifier,
    ) -> Result<MetadataResult, MetadataError> {
        let actor = self.acting_user(actor_id)?;
        let (stream_id, topic_id, group) = self.resolve_consumer_group(stream, topic, group)?;
        let group_id = group.id;
        if !actor.permissions.read_topic(stream_id, topic_id) {
            return Err(MetadataError::PermissionDenied(actor_id));
        }

        self.topic_mut(stream_id, topic_id).consumer_groups.remove(&group_id);
        Ok(MetadataResult::ConsumerGroupDeleted { stream: stream_id, topic: topic_id, group: group_id })
    }

    pub(super) fn join_consumer_group(
        &mut self,
        actor_id: u32,
        stream: &Identifier,
        topic: &Identifier,
        group: &Identifier,
        member: u128,
    ) -> Result<MetadataResult, MetadataError> {
        let actor = self.acting_user(actor_id)?;
        let (stream_id, topic_id, group) = self.resolve_consumer_group(stream, topic, group)?;
        let group_id = group.id;
        if !actor.permissions.poll_messages(stream_id, topic_id) {
            return Err(MetadataError::PermissionDenied(actor_id));
        }
        if group.members.contains_key(&member) {
            return Ok(MetadataResult::ConsumerGroupJoined {
                stream: stream_id,
                topic: topic_id,
                group: group_id,
                already_member: true,
            });
        }
        if group.members.len() >= self.limits.members_per_group_max as usize {
            return Err(MetadataError::LimitReached(Limit::MembersPerGroup));
        }

        let topic = self.topic_mut(stream_id, topic_id);
        let partitions_count = topic.partitions_count();
        let group = topic.consumer_groups.get_mut(&group_id).expect("resolved above");
        group.members.insert(member, Vec::new());
        group.rebalance(partitions_count);
        Ok(MetadataResult::ConsumerGroupJoined {
            stream: stream_id,
            topic: topic_id,
            group: group_id,
            already_member: false,
        })
    }

    pub(super) fn leave_consumer_group(
        &mut self,
        actor_id: u32,
        stream: &Identifier,
        topic: &Identifier,
        group: &Identifier,
        member: u128,
    ) -> Result<MetadataResult, MetadataError> {
        let actor = self.acting_user(actor_id)?;
        let (stream_id, topic_id, group) = self.resolve_consumer_group(stream, topic, group)?;
        let group_id = group.id;
        if !actor.permissions.poll_messages(stream_id, topic_id) {
            return Err(MetadataError::PermissionDenied(actor_id));
        }
        if !group.members.contains_key(&member) {
            return Err(MetadataError::ConsumerGroupMemberNotFound { group: group_id, member });
        }

        let topic = self.topic_mut(stream_id, topic_id);
        let partitions_count = topic.partitions_count();
        let group = topic.consumer_groups.get_mut(&group_id).expect("resolved above");
        group.members.remove(&member);
        group.rebalance(partitions_count);
        Ok(MetadataResult::ConsumerGroupLeft { stream: stream_id, topic: topic_id, group: group_id })
    }

    /// Takes a client whose session ended out of every group it was in, rebalancing each; returns
    /// those groups as (stream, topic, group). Mutates replicated state: call it only while applying
    /// a committed operation (the logout or eviction that ended the session), never on a local event.
    pub fn remove_client_everywhere(&mut self, client: u128) -> Vec<(u32, u32, u32)> {
        let mut left = Vec::new();
        for stream in self.streams.values_mut() {
            for topic in stream.topics.values_mut() {
                let partitions_count = topic.partitions_count();
                for group in topic.consumer_groups.values_mut() {
                    if group.members.remove(&client).is_some() {
                        group.rebalance(partitions_count);
                        left.push((stream.id, topic.id, group.id));
                    }
                }
                if let Err(broken) = topic.check(&self.limits) {
                    panic!("after removing client {client}: {broken}");
                }
            }
        }
        left
    }

    /// The groups `client` is a member of, as (stream, topic, group): what get_me reports.
    pub fn groups_of_client(&self, client: u128) -> Vec<(u32, u32, u32)> {
        let mut groups = Vec::new();
        for stream in self.streams.values() {
            for topic in stream.topics.values() {
                for group in topic.consumer_groups.values() {
                    if group.members.contains_key(&client) {
                        groups.push((stream.id, topic.id, group.id));
                    }
                }
            }
        }
        groups
    }

    /// Each member's partitions in a group, or `None` when the group does not exist.
    pub fn assignment(&self, stream: u32, topic: u32, group: u32) -> Option<&BTreeMap<u128, Vec<u32>>> {
        self.consumer_group(stream, topic, group).map(|group| &group.members)
    }

    /// The partitions one member owns, ascending; `None` when it is not a member.
    pub fn partitions_of(&self, stream: u32, topic: u32, group: u32, member: u128) -> Option<&[u32]> {
        self.consumer_group(stream, topic, group)?.members.get(&member).map(Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group_with(members: &[(u128, &[u32])]) -> ConsumerGroup {
        let members = members.iter().map(|(member, partitions)| (*member, partitions.to_vec())).collect();
        ConsumerGroup { id: 0, name: "g".into(), members }
    }

    #[test]
    fn the_first_member_takes_everything_and_a_second_takes_only_the_surplus() {
        let mut group = group_with(&[(5, &[])]);
        group.rebalance(5);
        assert_eq!(group.members[&5], vec![0, 1, 2, 3, 4]);

        group.members.insert(3, Vec::new());
        group.rebalance(5);
        assert_eq!(group.members[&5], vec![0, 1, 2], "the old member keeps its lowest, up to the ceiling");
        assert_eq!(group.members[&3], vec![3, 4]);
        group.check_assignment(5).unwrap();
    }

    #[test]
    fn a_leaver_s_partitions_go_to_those_short_of_their_quota() {
        let mut group = group_with(&[(1, &[0, 3]), (2, &[1, 4]), (3, &[2, 5])]);
        group.members.remove(&2);
        group.rebalance(6);
        assert_eq!(group.members[&1], vec![0, 1, 3]);
        assert_eq!(group.members[&3], vec![2, 4, 5]);
    }

    #[test]
    fn the_larger_quotas_go_to_those_holding_most() {
        // 5 partitions over 3 members: two may hold 2. Member 9 holds 3 and member 7 holds 2, so
        // they get the larger quotas and only member 9's third partition moves.
        let mut group = group_with(&[(7, &[3, 4]), (8, &[]), (9, &[0, 1, 2])]);
        group.rebalance(5);
        assert_eq!(group.members[&7], vec![3, 4]);
        assert_eq!(group.members[&9], vec![0, 1]);
        assert_eq!(group.members[&8], vec![2]);
    }

    #[test]
    fn deleted_partitions_leave_and_new_ones_spread() {
        let mut group = group_with(&[(1, &[0, 1]), (2, &[2, 3])]);
        group.rebalance(3);
        assert_eq!((group.members[&1].clone(), group.members[&2].clone()), (vec![0, 1], vec![2]));
        group.rebalance(6);
        assert_eq!((group.members[&1].clone(), group.members[&2].clone()), (vec![0, 1, 3], vec![2, 4, 5]));
    }

    #[test]
    fn more_members_than_partitions_leaves_some_idle() {
        let mut group = group_with(&[(1, &[]), (2, &[]), (3, &[])]);
        group.rebalance(2);
        assert_eq!(group.members[&1], vec![0]);
        assert_eq!(group.members[&2], vec![1]);
        assert!(group.members[&3].is_empty());
        group.check_assignment(2).unwrap();
    }
}
