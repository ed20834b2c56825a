//! The glommio driver on a real directory: thousands of segments through a small bound on open
//! files, recovery over them, and the shards' bounded channel mesh.

use std::path::PathBuf;

use vireo_io::glommio::{
    run_on_cpu, run_shards, yield_to_io, CpuAllocation, DriverConfig, DriverEvent, GlommioIo, NetEvent,
};
use vireo_io::{Io, Namespace, Peer};
use vireo_storage::batch::{self, BatchBuilder};
use vireo_storage::partition::{PartitionConfig, PartitionEvent, PartitionLog, ReadRequest, ReadStart};

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("vireo-driver-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

async fn until_event(
    io: &mut GlommioIo,
    log: &mut PartitionLog,
    wanted: impl Fn(&PartitionEvent) -> bool,
) -> PartitionEvent {
    loop {
        while let Some(event) = log.poll_event() {
            if wanted(&event) {
                return event;
            }
        }
        let Some(completion) = io.next_completion().await else {
            panic!(
                "nothing in flight: end {} written {} synced {} idle {}",
                log.end_offset(),
                log.written_offset(),
                log.synced_offset(),
                log.is_idle()
            );
        };
        log.on_completion(io, completion);
    }
}

const OPEN_FILES_MAX: usize = 16;
const SEGMENTS: u64 = 2000;

#[test]
fn thousands_of_segments_with_a_bounded_number_of_open_files() {
    let dir = scratch("segments");
    let config = PartitionConfig { segment_size: 1024, ..PartitionConfig::default() };
    let driver = DriverConfig { open_files_max: OPEN_FILES_MAX, ..DriverConfig::new(&dir) };
    let namespace = Namespace::partition(0, 0, 0);
    let peak = run_on_cpu(0, "driver-test", move || async move {
        let mut peak = 0;
        for round in 0..2 {
            let mut io = GlommioIo::new(&driver).unwrap();
            let mut log = PartitionLog::open(&mut io, config.clone(), namespace, 0);
            let PartitionEvent::Opened(report) =
                until_event(&mut io, &mut log, |event| matches!(event, PartitionEvent::Opened(_))).await
            else {
                unreachable!()
            };
            if round == 0 {
                // One batch of about 1 KiB per segment.
                for at in 0..SEGMENTS {
                    let bytes = BatchBuilder::new().message(at as u128, &[at as u8; 900], b"").finish(0);
                    while log.append(&mut io, bytes.clone(), at).is_err() {
                        let completion = io.next_completion().await.unwrap();
                        log.on_completion(&mut io, completion);
                    }
                    peak = peak.max(io.open_files());
                    yield_to_io().await;
                    while let Some(completion) = io.try_completion() {
                        log.on_completion(&mut io, completion);
                    }
                }
                log.sync(&mut io);
                let end = log.end_offset();
                until_event(
                    &mut io,
                    &mut log,
                    |event| matches!(event, PartitionEvent::Durable { offset } if *offset == end),
                )
                .await;
            } else {
                assert_eq!(report.end_offset, SEGMENTS, "{report:?}");
                assert!(report.segments_trusted as u64 >= SEGMENTS - 2, "{report:?}");
            }
            // Read every message back, one read per segment.
            for at in 0..SEGMENTS {
                let request = ReadRequest { id: at, start: ReadStart::Offset(at), count: 1, bytes_max: 4096 };
                log.read(&mut io, request).unwrap();
                let PartitionEvent::Read { result, .. } =
                    until_event(&mut io, &mut log, |event| matches!(event, PartitionEvent::Read { .. })).await
                else {
                    unreachable!()
                };
                let read = result.unwrap();
                let messages = batch::messages(&read.bytes).unwrap();
                assert_eq!(messages[0].offset, at);
                assert_eq!(messages[0].id, at as u128);
                peak = peak.max(io.open_files());
            }
            while let Some(completion) = io.next_completion().await {
                log.on_completion(&mut io, completion);
            }
        }
        peak
    })
    .unwrap();
    assert!(peak <= OPEN_FILES_MAX, "{peak} files open at once");
    let segments = std::fs::read_dir(dir.join("streams/0/topics/0/partitions/0"))
        .unwrap()
        .filter(|entry| entry.as_ref().unwrap().path().extension().is_some_and(|ext| ext == "log"))
        .count();
    assert!(segments as u64 >= SEGMENTS, "{segments} segment files");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn shards_exchange_messages_over_bounded_channels() {
    // The receiver starts only once the sender has seen its channel full: on two cores it would
    // otherwise drain the channel while the sender fills it.
    static FULL_SEEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let cpus = CpuAllocation::Count(2).cpus();
    let cpus = if cpus.len() == 2 { cpus } else { vec![cpus[0], cpus[0]] };
    let received = run_shards::<u64, Vec<u64>, _, _>(&cpus, 4, |mut context| async move {
        let peer = 1 - context.shard;
        if context.shard == 0 {
            // Fill the channel: the fifth message does not fit until the peer receives.
            for value in 0..4 {
                context.senders.try_send_to(peer, value).unwrap();
            }
            assert!(context.senders.try_send_to(peer, 4).is_err(), "a full channel refuses");
            FULL_SEEN.store(true, std::sync::atomic::Ordering::Release);
            for value in 4..100 {
                context.senders.send_to(peer, value).await.unwrap();
            }
            Vec::new()
        } else {
            // Bounded: the sender sets it within its first five sends.
            for _ in 0..10_000 {
                if FULL_SEEN.load(std::sync::atomic::Ordering::Acquire) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let mut values = Vec::new();
            let streams = context.receivers.streams();
            let (_, stream) = streams.into_iter().find(|(from, _)| *from == peer).unwrap();
            while values.len() < 100 {
                values.push(stream.recv().await.unwrap());
            }
            values
        }
    })
    .unwrap();
    assert_eq!(received[1], (0..100).collect::<Vec<u64>>());
}

/// A frame as `PROTOCOL.md` has it: 256-byte header, total size at byte 48, then the body.
fn frame(body: &[u8]) -> Vec<u8> {
    let mut frame = vec![0u8; 256];
    frame[48..52].copy_from_slice(&((256 + body.len()) as u32).to_le_bytes());
    frame.extend_from_slice(body);
    frame
}

#[test]
fn client_connections_carry_whole_frames_and_malformed_ones_close_them() {
    use futures_lite::{AsyncReadExt, AsyncWriteExt};
    let dir = scratch("tcp");
    let driver = DriverConfig::new(&dir);
    run_on_cpu(0, "tcp-test", move || async move {
        let mut io = GlommioIo::new(&driver).unwrap();
        let address = io.listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let client = glommio::spawn_local(async move {
            let mut stream = glommio::net::TcpStream::connect(address).await.unwrap();
            // Two frames in one write, the second split across two.
            let mut both = frame(b"hello");
            both.extend(frame(&[7u8; 100_000]));
            stream.write_all(&both[..300]).await.unwrap();
            stream.write_all(&both[300..]).await.unwrap();
            let mut echo = vec![0u8; 256 + 5];
            stream.read_exact(&mut echo).await.unwrap();
            assert_eq!(&echo[256..], b"hello");
            // A frame claiming 10 bytes: the server closes the connection.
            let mut bad = frame(b"");
            bad[48..52].copy_from_slice(&10u32.to_le_bytes());
            stream.write_all(&bad).await.unwrap();
            let mut rest = Vec::new();
            stream.read_to_end(&mut rest).await.unwrap();
        });
        let mut frames = Vec::new();
        let reason = loop {
            match io.next_event().await {
                DriverEvent::Net(NetEvent::Connected { .. }) => {}
                DriverEvent::Net(NetEvent::Frame { client, frame }) => {
                    if frames.is_empty() {
                        io.send(Peer::Client(client), frame.clone());
                    }
                    frames.push(frame);
                }
                DriverEvent::Net(NetEvent::Closed { reason, .. }) => break reason,
                DriverEvent::Completion(completion) => panic!("no I/O was asked for: {completion:?}"),
            }
        };
        client.await;
        assert_eq!(frames, vec![frame(b"hello"), frame(&[7u8; 100_000])]);
        assert!(reason.contains("frame size 10"), "{reason}");
        assert_eq!(io.connections(), 0);
    })
    .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether the block device holding `dir` completes polled I/O, as its queue says
/// (`/sys/dev/block/MAJOR:0/queue/io_poll`; a partition's queue is its disk's). `None`: not a
/// block device this can tell (tmpfs, an overlay), and nothing to check.
fn device_polls(dir: &std::path::Path) -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    let device = std::fs::metadata(dir).ok()?.dev();
    let major = (device >> 8) & 0xfff;
    let io_poll = std::fs::read_to_string(format!("/sys/dev/block/{major}:0/queue/io_poll")).ok()?;
    Some(io_poll.trim() != "0")
}

/// On a device that cannot poll, a segment's writes go to the ring the executor sleeps on, not to
/// glommio's polled ring, which it would spin on while a write is in flight
/// (`settle_polled_ring_probe`). Without the settled probe, glommio's own probe of the first,
/// empty, segment says yes and every write here goes to the polled ring: this test then fails.
#[test]
fn segment_writes_go_to_the_ring_the_executor_sleeps_on() {
    let dir = scratch("polled-ring");
    let driver = DriverConfig { segments_direct: true, ..DriverConfig::new(&dir) };
    let (polled, written) = run_on_cpu(0, "driver-test", move || async move {
        let mut io = GlommioIo::new(&driver).unwrap();
        let _ = glommio::executor().io_stats();
        let file = vireo_io::FileId::new(Namespace::partition(0, 0, 0), vireo_io::FileKind::Segment(0));
        for round in 0..4u64 {
            io.write(file, round * 4096, vec![round as u8; 4096].into(), vireo_io::Token(round));
            io.next_completion().await.expect("the write completes");
        }
        let stats = glommio::executor().io_stats();
        (stats.poll_ring.file_writes().0, stats.main_ring.file_writes().0)
    })
    .unwrap();
    let polls = device_polls(&dir);
    println!("device polls: {polls:?}; writes on the polled ring {polled}, on the main ring {written}");
    if polls == Some(false) {
        assert_eq!(polled, 0, "a device that cannot poll got {polled} polled writes");
        assert!(written >= 4, "the writes went to the main ring: {written}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
