//! The Kafka log checker against random histories: a model log per partition with producers
//! appending (acknowledged, rejected, timed out written or not), consumers polling contiguous
//! ranges with resets and assignments, group assignments, a final drain and a final read. A
//! correct history never raises an anomaly; one mutation of it (the bugs a server could have)
//! raises the matching one.

use std::collections::BTreeMap;

use proptest::collection::vec;
use proptest::prelude::*;
use vireo_sim::kafka_log::{Anomaly, CheckSummary, KafkaLogChecker, PartitionKey};

const PARTITIONS: [PartitionKey; 3] = [
    PartitionKey { stream: 1, topic: 1, partition: 0 },
    PartitionKey { stream: 1, topic: 1, partition: 1 },
    PartitionKey { stream: 2, topic: 1, partition: 0 },
];

/// The consumer that reads every partition from 0 at the end, so no acknowledged value is unseen.
const DRAIN_CONSUMER: u64 = 99;
const DRAIN_POLL_MAX: usize = 4;

/// What the workload does next, as drawn.
#[derive(Clone, Debug)]
enum Step {
    Send { producer: u64, partition: usize, len: usize, outcome: Outcome },
    Poll { consumer: u64, partition: usize, max: usize },
    Reset { consumer: u64, partition: usize, from: usize },
    Assign { consumer: u64, partition: usize, start: usize },
    Group { members: usize, partitions_count: u32 },
}

#[derive(Clone, Copy, Debug)]
enum Outcome {
    Acked,
    Failed,
    TimedOutWritten,
    TimedOutNotWritten,
}

/// One observation fed to the checker.
#[derive(Clone, Debug)]
enum Event {
    Invoke { producer: u64, values: Vec<u128> },
    Ack { producer: u64, partition: PartitionKey, base: u64, values: Vec<u128> },
    Fail { producer: u64, values: Vec<u128> },
    Indeterminate { producer: u64, values: Vec<u128> },
    Poll { consumer: u64, partition: PartitionKey, from: u64, messages: Vec<(u64, u128)> },
    Reset { consumer: u64, partition: PartitionKey },
    Assign { consumer: u64, partition: PartitionKey, start: u64 },
    Group { at: u64, partitions_count: u32, assignment: BTreeMap<u128, Vec<u32>> },
    Final { partition: PartitionKey, messages: Vec<(u64, u128)> },
}

fn step() -> impl Strategy<Value = Step> {
    let outcome = prop_oneof![
        4 => Just(Outcome::Acked),
        1 => Just(Outcome::Failed),
        1 => Just(Outcome::TimedOutWritten),
        1 => Just(Outcome::TimedOutNotWritten),
    ];
    prop_oneof![
        5 => (0u64..3, 0usize..3, 1usize..4, outcome)
            .prop_map(|(producer, partition, len, outcome)| Step::Send { producer, partition, len, outcome }),
        4 => (0u64..3, 0usize..3, 0usize..5)
            .prop_map(|(consumer, partition, max)| Step::Poll { consumer, partition, max }),
        1 => (0u64..3, 0usize..3, any::<usize>())
            .prop_map(|(consumer, partition, from)| Step::Reset { consumer, partition, from }),
        1 => (0u64..3, 0usize..3, any::<usize>())
            .prop_map(|(consumer, partition, start)| Step::Assign { consumer, partition, start }),
        1 => (1usize..4, 1u32..5).prop_map(|(members, partitions_count)| Step::Group { members, partitions_count }),
    ]
}

/// Where a consumer's run will read next: a position, or (after a reset) the offset it will ask.
#[derive(Clone, Copy)]
enum Position {
    Known(usize),
    Asks(usize),
}

/// A correct history for `steps`: the model logs are the truth every observation reports.
fn build(steps: &[Step]) -> Vec<Event> {
    let mut logs: Vec<Vec<u128>> = vec![Vec::new(); PARTITIONS.len()];
    let mut positions: BTreeMap<(u64, usize), Position> = BTreeMap::new();
    let mut events = Vec::new();
    // Large ids, so a value never collides with an offset in a failure message.
    let mut next_value: u128 = 1 << 100;
    let mut at = 0;
    let mut group = |events: &mut Vec<Event>, members: usize, partitions_count: u32| {
        at += 1;
        let mut assignment: BTreeMap<u128, Vec<u32>> = (0..members).map(|member| (member as u128, vec![])).collect();
        for partition in 0..partitions_count {
            assignment.get_mut(&((partition as usize % members) as u128)).unwrap().push(partition);
        }
        events.push(Event::Group { at, partitions_count, assignment });
    };
    for step in steps {
        match *step {
            Step::Send { producer, partition, len, outcome } => {
                let values: Vec<u128> = (0..len as u128).map(|index| next_value + index).collect();
                next_value += len as u128;
                events.push(Event::Invoke { producer, values: values.clone() });
                let log = &mut logs[partition];
                let base = log.len() as u64;
                match outcome {
                    Outcome::Acked => {
                        log.extend(&values);
                        events.push(Event::Ack { producer, partition: PARTITIONS[partition], base, values });
                    }
                    Outcome::Failed => events.push(Event::Fail { producer, values }),
                    Outcome::TimedOutWritten => {
                        log.extend(&values);
                        events.push(Event::Indeterminate { producer, values });
                    }
                    Outcome::TimedOutNotWritten => events.push(Event::Indeterminate { producer, values }),
                }
            }
            Step::Poll { consumer, partition, max } => {
                let position = positions.get(&(consumer, partition)).copied().unwrap_or(Position::Asks(0));
                let from = match position {
                    Position::Known(offset) | Position::Asks(offset) => offset,
                };
                let log = &logs[partition];
                let to = (from + max).min(log.len());
                let messages: Vec<(u64, u128)> = (from..to).map(|offset| (offset as u64, log[offset])).collect();
                if to > from {
                    positions.insert((consumer, partition), Position::Known(to));
                }
                events.push(Event::Poll { consumer, partition: PARTITIONS[partition], from: from as u64, messages });
            }
            Step::Reset { consumer, partition, from } => {
                positions.insert((consumer, partition), Position::Asks(from % (logs[partition].len() + 1)));
                events.push(Event::Reset { consumer, partition: PARTITIONS[partition] });
            }
            Step::Assign { consumer, partition, start } => {
                let start = start % (logs[partition].len() + 1);
                positions.insert((consumer, partition), Position::Known(start));
                events.push(Event::Assign { consumer, partition: PARTITIONS[partition], start: start as u64 });
            }
            Step::Group { members, partitions_count } => group(&mut events, members, partitions_count),
        }
    }
    // Always one assignment with two members, so the overlap mutation has something to break.
    group(&mut events, 2, 3);
    for (index, log) in logs.iter().enumerate() {
        let partition = PARTITIONS[index];
        events.push(Event::Assign { consumer: DRAIN_CONSUMER, partition, start: 0 });
        for from in (0..log.len()).step_by(DRAIN_POLL_MAX) {
            let to = (from + DRAIN_POLL_MAX).min(log.len());
            let messages = (from..to).map(|offset| (offset as u64, log[offset])).collect();
            events.push(Event::Poll { consumer: DRAIN_CONSUMER, partition, from: from as u64, messages });
        }
    }
    for (index, log) in logs.iter().enumerate() {
        let messages = log.iter().enumerate().map(|(offset, value)| (offset as u64, *value)).collect();
        events.push(Event::Final { partition: PARTITIONS[index], messages });
    }
    events
}

fn replay(events: &[Event]) -> Result<CheckSummary, Anomaly> {
    let mut checker = KafkaLogChecker::new();
    for event in events {
        match event {
            Event::Invoke { producer, values } => checker.send_invoked(*producer, values)?,
            Event::Ack { producer, partition, base, values } => {
                checker.send_acked(*producer, *partition, *base, values)?
            }
            Event::Fail { producer, values } => checker.send_failed(*producer, values)?,
            Event::Indeterminate { producer, values } => checker.send_indeterminate(*producer, values)?,
            Event::Poll { consumer, partition, from, messages } => {
                checker.polled(*consumer, *partition, *from, messages)?
            }
            Event::Reset { consumer, partition } => checker.consumer_reset(*consumer, *partition),
            Event::Assign { consumer, partition, start } => checker.consumer_assigned(*consumer, *partition, *start),
            Event::Group { at, partitions_count, assignment } => {
                checker.group_assignment(*at, (1, 1, 1), *partitions_count, assignment)?
            }
            Event::Final { partition, messages } => checker.final_read(*partition, 0, messages)?,
        }
    }
    checker.finish()
}

/// The bugs a server could have, each as an edit of a correct history.
#[derive(Clone, Copy, Debug)]
enum Mutation {
    /// The final read loses one message: a hole in the middle, or a short log.
    DropFromFinalRead,
    /// The final read ends with one more message repeating a value the log already holds.
    DuplicateInFinalRead,
    /// The final read holds two values at each other's offsets.
    SwapInFinalRead,
    /// A poll leaves out one message that is not its last.
    SkipInPoll,
    /// A poll starts one offset before where it should.
    RewindPoll,
    /// Two batches of one producer to one partition: the producer sent them in the other order.
    ReorderProducerAcks,
    /// A member also owns a partition another member owns.
    OverlapAssignment,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        Just(Mutation::DropFromFinalRead),
        Just(Mutation::DuplicateInFinalRead),
        Just(Mutation::SwapInFinalRead),
        Just(Mutation::SkipInPoll),
        Just(Mutation::RewindPoll),
        Just(Mutation::ReorderProducerAcks),
        Just(Mutation::OverlapAssignment),
    ]
}

/// The variant's name, from its Debug form.
fn kind(anomaly: &Anomaly) -> String {
    format!("{anomaly:?}").split([' ', '(']).next().unwrap().to_string()
}

/// `pick` chooses among the events (and positions) the mutation applies to.
fn pick_of<T>(candidates: &[T], pick: usize) -> Option<&T> {
    (!candidates.is_empty()).then(|| &candidates[pick % candidates.len()])
}

/// The mutated history and the anomalies it may raise (the first one the checker meets), or
/// None when the history has nothing this mutation applies to.
fn mutate(events: &[Event], mutation: Mutation, pick: usize) -> Option<(Vec<Event>, &'static [&'static str])> {
    let mut events = events.to_vec();
    let finals: Vec<usize> = (0..events.len())
        .filter(|index| matches!(&events[*index], Event::Final { messages, .. } if !messages.is_empty()))
        .collect();
    let polls_of = |min_len: usize| -> Vec<usize> {
        (0..events.len())
            .filter(|index| matches!(&events[*index], Event::Poll { messages, .. } if messages.len() >= min_len))
            .collect()
    };
    let expected: &'static [&'static str] = match mutation {
        Mutation::DropFromFinalRead => {
            let index = *pick_of(&finals, pick)?;
            let Event::Final { messages, .. } = &mut events[index] else { unreachable!() };
            let dropped = (pick / 7) % messages.len();
            let last = dropped == messages.len() - 1;
            messages.remove(dropped);
            // Every value in the log was polled by the drain, so a short log lost a write.
            if last {
                &["LostWrite"]
            } else {
                &["PollSkip"]
            }
        }
        Mutation::DuplicateInFinalRead => {
            let all: Vec<u128> = finals
                .iter()
                .flat_map(|index| match &events[*index] {
                    Event::Final { messages, .. } => messages.iter().map(|(_, value)| *value).collect::<Vec<_>>(),
                    _ => unreachable!(),
                })
                .collect();
            let value = *pick_of(&all, pick)?;
            let index = finals[(pick / 7) % finals.len()];
            let Event::Final { messages, .. } = &mut events[index] else { unreachable!() };
            messages.push((messages.len() as u64, value));
            &["Duplicate"]
        }
        Mutation::SwapInFinalRead => {
            let long: Vec<usize> = finals
                .iter()
                .copied()
                .filter(|index| matches!(&events[*index], Event::Final { messages, .. } if messages.len() >= 2))
                .collect();
            let index = *pick_of(&long, pick)?;
            let Event::Final { messages, .. } = &mut events[index] else { unreachable!() };
            let first = (pick / 7) % messages.len();
            let second = (first + 1 + (pick / 49) % (messages.len() - 1)) % messages.len();
            let value = messages[first].1;
            messages[first].1 = messages[second].1;
            messages[second].1 = value;
            // The drain polled every offset first.
            &["InconsistentOffsets"]
        }
        Mutation::SkipInPoll => {
            let index = *pick_of(&polls_of(2), pick)?;
            let Event::Poll { messages, .. } = &mut events[index] else { unreachable!() };
            messages.remove((pick / 7) % (messages.len() - 1));
            &["PollSkip"]
        }
        Mutation::RewindPoll => {
            let rewindable: Vec<usize> = polls_of(1)
                .into_iter()
                .filter(|index| matches!(&events[*index], Event::Poll { messages, .. } if messages[0].0 > 0))
                .collect();
            let index = *pick_of(&rewindable, pick)?;
            let Event::Poll { partition, messages, .. } = &events[index] else { unreachable!() };
            let (partition, offset) = (*partition, messages[0].0 - 1);
            let value = events
                .iter()
                .find_map(|event| match event {
                    Event::Final { partition: read, messages } if *read == partition => {
                        Some(messages[offset as usize].1)
                    }
                    _ => None,
                })
                .unwrap();
            let Event::Poll { messages, .. } = &mut events[index] else { unreachable!() };
            messages.insert(0, (offset, value));
            &["NonmonotonicPoll"]
        }
        Mutation::ReorderProducerAcks => {
            let acks: Vec<(usize, u64, PartitionKey)> = events
                .iter()
                .enumerate()
                .filter_map(|(index, event)| match event {
                    Event::Ack { producer, partition, .. } => Some((index, *producer, *partition)),
                    _ => None,
                })
                .collect();
            let pairs: Vec<(usize, usize)> = acks
                .iter()
                .enumerate()
                .flat_map(|(at, first)| {
                    acks[at + 1..]
                        .iter()
                        .filter(move |second| (second.1, second.2) == (first.1, first.2))
                        .map(move |second| (first.0, second.0))
                })
                .collect();
            let &(first, second) = pick_of(&pairs, pick)?;
            // The producer sends the second batch first: each invoke (just before its ack) and
            // ack trade values, each ack keeping the values' true offsets.
            let (
                Event::Ack { base: first_base, values: first_values, .. },
                Event::Ack { base: second_base, values: second_values, .. },
            ) = (events[first].clone(), events[second].clone())
            else {
                unreachable!()
            };
            for (index, base, values) in [(first, second_base, second_values), (second, first_base, first_values)] {
                let Event::Invoke { values: invoked, .. } = &mut events[index - 1] else { unreachable!() };
                *invoked = values.clone();
                let Event::Ack { base: acked_base, values: acked, .. } = &mut events[index] else { unreachable!() };
                *acked_base = base;
                *acked = values;
            }
            // A poll between the two may read the values before their (now later) send.
            &["NonmonotonicSend", "UnknownValue"]
        }
        Mutation::OverlapAssignment => {
            let groups: Vec<usize> = (0..events.len())
                .filter(|index| {
                    matches!(&events[*index], Event::Group { assignment, partitions_count, .. }
                        if assignment.len() >= 2 && *partitions_count >= 1)
                })
                .collect();
            let index = *pick_of(&groups, pick)?;
            let Event::Group { assignment, .. } = &mut events[index] else { unreachable!() };
            let (&owner, owned) = assignment.iter().find(|(_, owned)| !owned.is_empty()).unwrap();
            let partition = owned[0];
            let other = *assignment.keys().find(|member| **member != owner).unwrap();
            assignment.get_mut(&other).unwrap().push(partition);
            &["GroupOverlap"]
        }
    };
    Some((events, expected))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_correct_history_passes_and_a_mutated_one_is_caught(
        steps in vec(step(), 1..80),
        mutation in mutation(),
        pick in any::<usize>(),
    ) {
        let history = build(&steps);
        let summary = replay(&history).map_err(|anomaly| TestCaseError::fail(format!("correct history: {anomaly}")))?;
        prop_assert_eq!(summary.partitions_read, PARTITIONS.len() as u64);
        if let Some((mutated, expected)) = mutate(&history, mutation, pick) {
            match replay(&mutated) {
                Ok(_) => return Err(TestCaseError::fail(format!("{mutation:?} went unnoticed"))),
                Err(anomaly) => prop_assert!(
                    expected.contains(&kind(&anomaly).as_str()),
                    "{:?} raised {} ({}), expected one of {:?}", mutation, kind(&anomaly), anomaly, expected
                ),
            }
        }
    }

    /// Same history, same verdict: the checker is a function of the observations.
    #[test]
    fn the_verdict_is_deterministic(steps in vec(step(), 1..40), mutation in mutation(), pick in any::<usize>()) {
        let history = build(&steps);
        let events = mutate(&history, mutation, pick).map_or(history, |(events, _)| events);
        prop_assert_eq!(replay(&events), replay(&events));
    }
}

/// A busy fixed history to which every mutation applies, at every pick tried: the proptest's
/// mutations are not vacuous.
#[test]
fn every_mutation_applies_and_is_caught_on_a_busy_history() {
    let send = |producer, partition, outcome| Step::Send { producer, partition, len: 2, outcome };
    let steps = vec![
        send(0, 0, Outcome::Acked),
        send(1, 0, Outcome::TimedOutWritten),
        Step::Poll { consumer: 0, partition: 0, max: 3 },
        send(0, 0, Outcome::Acked),
        send(2, 1, Outcome::Failed),
        send(2, 1, Outcome::Acked),
        Step::Reset { consumer: 1, partition: 0, from: 1 },
        Step::Poll { consumer: 1, partition: 0, max: 4 },
        send(0, 2, Outcome::TimedOutNotWritten),
        send(0, 0, Outcome::Acked),
        Step::Assign { consumer: 0, partition: 1, start: 1 },
        Step::Poll { consumer: 0, partition: 1, max: 2 },
        Step::Group { members: 3, partitions_count: 4 },
    ];
    let history = build(&steps);
    let summary = replay(&history).unwrap();
    assert_eq!(summary.values_acked, 8);
    let mutations = [
        Mutation::DropFromFinalRead,
        Mutation::DuplicateInFinalRead,
        Mutation::SwapInFinalRead,
        Mutation::SkipInPoll,
        Mutation::RewindPoll,
        Mutation::ReorderProducerAcks,
        Mutation::OverlapAssignment,
    ];
    for mutation in mutations {
        for pick in 0..50 {
            let (mutated, expected) = mutate(&history, mutation, pick).expect("applies");
            let anomaly = replay(&mutated).expect_err("caught");
            assert!(expected.contains(&kind(&anomaly).as_str()), "{mutation:?} pick {pick}: {anomaly}");
        }
    }
}
