//! What get_stream, get_topic and get_topics report of partitions (segments, current offset,
//! size, messages): figures only the partition groups know, each on the shard that hosts it.
//! Every shard sends its groups' figures to the node's other shards every `FIGURES_TICKS`, so
//! any shard answers these reads for every partition, at most that many ticks stale. They are
//! node-local and never replicated: the committed replies of creates show zeros, as a new topic
//! has.

use std::collections::BTreeMap;

use vireo_io::Namespace;

/// Ticks between two sends of a shard's figures.
pub const FIGURES_TICKS: u64 = 10;

/// One partition as its group's machine holds it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartitionFigures {
    pub segments: u32,
    /// The offset of the newest message (0 when there is none, as the reference reports).
    pub current_offset: u64,
    /// Bytes of the batches retained.
    pub size: u64,
    /// Messages retained.
    pub messages: u64,
}

/// Every shard's last figures, by shard; a shard's set replaces its previous one whole, so a
/// group that closed drops out. Bounded by the groups the shards host (`partitions_max` each).
#[derive(Clone, Debug, Default)]
pub struct NodeFigures {
    by_shard: BTreeMap<u16, BTreeMap<Namespace, PartitionFigures>>,
    /// The metadata group's primary as shard 0 last reported it (`None`: in a view change).
    pub metadata_leader: Option<u8>,
}

impl NodeFigures {
    pub fn replace(&mut self, shard: u16, figures: BTreeMap<Namespace, PartitionFigures>) {
        self.by_shard.insert(shard, figures);
    }

    /// Whether some shard of this node reported hosting the partition's group.
    pub fn hosted(&self, namespace: Namespace) -> bool {
        self.by_shard.values().any(|figures| figures.contains_key(&namespace))
    }

    /// A partition's figures, zero for one no shard reported yet.
    pub fn of(&self, namespace: Namespace) -> PartitionFigures {
        self.by_shard.values().find_map(|figures| figures.get(&namespace)).copied().unwrap_or_default()
    }

    /// The sums over a topic's partitions (size, messages).
    pub fn topic_totals(&self, stream: u32, topic: u32, partitions: impl Iterator<Item = u32>) -> (u64, u64) {
        partitions
            .map(|partition| self.of(Namespace::partition(stream, topic, partition)))
            .fold((0, 0), |(size, messages), figures| (size + figures.size, messages + figures.messages))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shards_figures_replace_its_previous_ones_and_topics_sum_their_partitions() {
        let mut figures = NodeFigures::default();
        let (a, b) = (Namespace::partition(1, 2, 0), Namespace::partition(1, 2, 1));
        let one = PartitionFigures { segments: 1, current_offset: 9, size: 100, messages: 10 };
        figures.replace(0, BTreeMap::from([(a, one)]));
        figures.replace(1, BTreeMap::from([(b, PartitionFigures { messages: 5, size: 50, ..one })]));
        assert_eq!(figures.of(a), one);
        assert_eq!(figures.topic_totals(1, 2, 0..2), (150, 15));
        figures.replace(0, BTreeMap::new());
        assert_eq!(figures.of(a), PartitionFigures::default(), "a group that closed drops out");
        assert_eq!(figures.topic_totals(1, 2, 0..2), (50, 5));
    }
}
