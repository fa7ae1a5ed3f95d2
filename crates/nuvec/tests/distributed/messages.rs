//! Point-to-point messages of every size, over TCP and through shared memory, whole and in
//! order; refused ones drained so the next arrives.

use super::*;

#[test]
fn send_and_recv_work_between_neighbours_and_non_neighbours() {
    run_ranks(
        test_name!(),
        4,
        TIMEOUT,
        references::send_and_recv_everywhere,
    );
}

/// Elements of a large message (over the 32 MiB from which messages travel in two halves).
const LARGE_MESSAGE: usize = (64 << 20) / 4 + 3;

/// Element `i`'s value in a test message: varied enough that a half (or a piece) out of
/// place shows, and exact in `f32`.
fn message_value(i: usize, shift: f32) -> f32 {
    ((i * 7919) % 1_000_003) as f32 + shift
}

fn message(elements: usize, shift: f32) -> Array {
    let values: Vec<f32> = (0..elements).map(|i| message_value(i, shift)).collect();
    Array::from_slice(&values, &[elements as i32])
}

fn is_message(got: &Array, elements: usize, shift: f32) -> bool {
    let values = got.to_vec::<f32>().unwrap();
    values.len() == elements
        && values
            .iter()
            .enumerate()
            .all(|(i, &v)| v == message_value(i, shift))
}

fn large_message(shift: f32) -> Array {
    message(LARGE_MESSAGE, shift)
}

fn is_large_message(got: &Array, shift: f32) -> bool {
    is_message(got, LARGE_MESSAGE, shift)
}

#[test]
fn messages_written_in_two_pieces_arrive_whole_and_in_order() {
    // Payloads from 48 to 96 KiB are written in two halves, one after the other; the sizes
    // straddle both ends of that range, and an odd element count splits unevenly.
    const ELEMENTS: [usize; 6] = [
        12 * 1024 - 1,
        12 * 1024,
        16 * 1024 + 1,
        24 * 1024,
        24 * 1024 + 1,
        8,
    ];
    run_ranks(test_name!(), 2, TIMEOUT, |group| {
        let (me, other) = (group.rank(), 1 - group.rank());
        for (k, &elements) in ELEMENTS.iter().enumerate() {
            let shift = (2 * k + me) as f32;
            let sent = distributed::send(&message(elements, shift), other, Some(&group));
            let got = distributed::recv_like(&message(elements, 0.0), other, Some(&group));
            if me == 0 {
                sent.check().unwrap();
                got.eval().unwrap();
            } else {
                got.eval().unwrap();
                sent.check().unwrap();
            }
            assert!(
                is_message(&got, elements, (2 * k + other) as f32),
                "message {k} of {elements} elements from rank {other}"
            );
        }
    });
}

#[test]
fn messages_of_64_mib_and_more_arrive_whole_both_ways() {
    // Such messages travel in two halves on two connections at once.
    run_ranks(test_name!(), 2, TIMEOUT, |group| {
        if group.rank() == 0 {
            distributed::send(&large_message(1.0), 1, Some(&group))
                .check()
                .unwrap();
            let back = distributed::recv_like(&large_message(0.0), 1, Some(&group));
            assert!(is_large_message(&back, 2.0));
        } else {
            let got = distributed::recv_like(&large_message(0.0), 0, Some(&group));
            assert!(is_large_message(&got, 1.0));
            distributed::send(&(&got + 1.0f32), 0, Some(&group))
                .check()
                .unwrap();
        }
        // The group goes on: a small sum after the large messages.
        let sum = distributed::all_sum(&array![1.0f32], Some(&group));
        assert_eq!(sum.to_vec::<f32>().unwrap(), vec![2.0]);
    });
}

#[test]
fn messages_of_every_size_arrive_whole_over_tcp_and_through_shared_memory() {
    // With NUVEC_RING_SHARED_MEMORY=off every payload goes on TCP (whole, in two pieces, in
    // two halves on two connections); with auto, those of 32 KiB and more between ranks on
    // one machine go through shared memory. Element counts straddle the thresholds.
    const ELEMENTS: [usize; 6] = [
        1000,
        8 * 1024 - 1,
        8 * 1024,
        16 * 1024 + 1,
        1 << 18,
        (33 << 20) / 4 + 3,
    ];
    launch_with_each(
        test_name!(),
        2,
        ("NUVEC_RING_SHARED_MEMORY", &["off", "auto"]),
        |group, mode| {
            let (me, other) = (group.rank(), 1 - group.rank());
            for (k, &elements) in ELEMENTS.iter().enumerate() {
                // Rank 0 sends first, then rank 1 answers with its own message.
                if me == 0 {
                    let shift = (2 * k) as f32;
                    distributed::send(&message(elements, shift), other, Some(&group))
                        .check()
                        .unwrap();
                }
                let got = distributed::recv_like(&message(elements, 0.0), other, Some(&group));
                got.eval().unwrap();
                assert!(
                    is_message(&got, elements, (2 * k + other) as f32),
                    "{mode}: message {k} of {elements} elements from rank {other}"
                );
                if me == 1 {
                    let shift = (2 * k + 1) as f32;
                    distributed::send(&message(elements, shift), other, Some(&group))
                        .check()
                        .unwrap();
                }
            }
        },
    );
}

#[test]
fn messages_of_16_mib_arrive_whole_in_both_ways_of_sending_them() {
    // From 16 MiB a sender times its first payloads sent in pieces and whole, alternating,
    // then keeps the faster way (ring/send_pieces.rs): eleven payloads decide, so thirteen cover
    // both ways and the one kept.
    // Both ways are TCP's: shared memory is turned off.
    const ELEMENTS: usize = (16 << 20) / 4 + 1;
    let launch = Launch {
        env: vec![("NUVEC_RING_SHARED_MEMORY".into(), "off".into())],
        ..Default::default()
    };
    launch_ranks(test_name!(), 2, TIMEOUT, &launch, |group| {
        let group = group.unwrap();
        for k in 0..13 {
            let shift = k as f32;
            if group.rank() == 0 {
                distributed::send(&message(ELEMENTS, shift), 1, Some(&group))
                    .check()
                    .unwrap();
            } else {
                let got = distributed::recv_like(&message(ELEMENTS, 0.0), 0, Some(&group));
                assert!(is_message(&got, ELEMENTS, shift), "message {k}");
            }
        }
    });
}

/// Large messages between ranks on one machine are read from the sender's memory; to a rank
/// that may not read it (`CrossMemory::Off`, as where the kernel refuses), the payload follows
/// on the connection, on the first message and on later ones, while that rank's own large
/// messages are still read. Two ranks as threads of this process, so their options differ.
#[test]
fn large_messages_to_a_rank_that_may_not_read_memory_arrive_another_way() {
    // Too large for a post (read when the receiver waits), past 256 KiB (both ends copy), and
    // past the slots' 1 MiB (read whether or not it waits).
    const SIZES: [usize; 3] = [(20 << 10) / 4 + 1, (512 << 10) / 4, (5 << 20) / 4 + 5];
    let ports = nuvec_test_support::ranks::free_ports(2);
    let nodes: Vec<Vec<String>> = ports
        .iter()
        .map(|p| vec![format!("127.0.0.1:{p}")])
        .collect();
    let handles: Vec<_> = (0..2)
        .map(|rank| {
            let nodes = nodes.clone();
            std::thread::spawn(move || {
                let mut options = distributed::Options::with_timeout(Duration::from_secs(20));
                if rank == 1 {
                    options = options.cross_memory(distributed::CrossMemory::Off);
                }
                let group = distributed::init_with(&nodes, rank, &options).expect("forming");
                let other = 1 - rank;
                for (k, elements) in SIZES.into_iter().flat_map(|e| [e; 3]).enumerate() {
                    // Rank 0 sends first, then rank 1 answers.
                    let send = |shift: usize| {
                        let x = message(elements, shift as f32);
                        distributed::send(&x, other, Some(&group)).check().unwrap();
                    };
                    if rank == 0 {
                        send(10 * k);
                    }
                    let got = distributed::recv_like(&message(elements, 0.0), other, Some(&group));
                    let want = (10 * k + other) as f32;
                    assert!(
                        is_message(&got, elements, want),
                        "rank {rank}, message {k} of {elements} elements"
                    );
                    if rank == 1 {
                        send(10 * k + 1);
                    }
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("a rank's thread");
    }
}

#[test]
fn a_large_message_of_another_shape_is_refused_and_the_next_one_arrives() {
    // Over TCP (in two halves) and through shared memory.
    launch_with_each(
        test_name!(),
        2,
        ("NUVEC_RING_SHARED_MEMORY", &["off", "auto"]),
        |group, _| refused_large_message_then_next(group),
    );
}

/// Receives a message like `wrong` from rank 0, which sent one of `sent` elements instead:
/// the error names rank 0, the shape it sent and what was expected.
fn expect_refused_from_rank_0(wrong: &Array, sent: usize, group: &Group) {
    let error = distributed::recv_like(wrong, 0, Some(group))
        .check()
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("[recv] rank 0:")
            && error.contains(&format!("[{sent}]"))
            && error.contains("expected"),
        "{error}"
    );
}

fn refused_large_message_then_next(group: Group) {
    let small = array![5.0f32, 6.0];
    if group.rank() == 0 {
        distributed::send(&large_message(0.0), 1, Some(&group))
            .check()
            .unwrap();
        distributed::send(&small, 1, Some(&group)).check().unwrap();
        distributed::send(&large_message(3.0), 1, Some(&group))
            .check()
            .unwrap();
    } else {
        let wrong = ops::zeros(&[LARGE_MESSAGE as i32 - 1], DType::F32);
        expect_refused_from_rank_0(&wrong, LARGE_MESSAGE, &group);
        let next = distributed::recv_like(&small, 0, Some(&group));
        assert_eq!(next.to_vec::<f32>().unwrap(), vec![5.0, 6.0]);
        // All of the refused message was drained: the next large one is whole.
        let large = distributed::recv_like(&large_message(0.0), 0, Some(&group));
        assert!(is_large_message(&large, 3.0));
    }
}

/// A message the post announces through the channel's slots (its receiver not yet waiting,
/// so it is not read from the sender's memory), refused for its shape: its bytes are skipped
/// in the slots, so the messages after it, whole in a post and through the slots, arrive.
#[test]
fn a_refused_message_through_the_slots_is_skipped_and_the_next_ones_arrive() {
    const ELEMENTS: usize = (64 << 10) / 4 + 3;
    run_ranks(test_name!(), 2, TIMEOUT, |group| {
        let small = array![5.0f32, 6.0];
        if group.rank() == 0 {
            for shift in [0.0, 1.0] {
                distributed::send(&message(ELEMENTS, shift), 1, Some(&group))
                    .check()
                    .unwrap();
            }
            distributed::send(&small, 1, Some(&group)).check().unwrap();
            distributed::send(&message(ELEMENTS, 3.0), 1, Some(&group))
                .check()
                .unwrap();
        } else {
            // Every message is in the slots or a post before this rank asks for any.
            std::thread::sleep(Duration::from_millis(200));
            let first = distributed::recv_like(&message(ELEMENTS, 0.0), 0, Some(&group));
            assert!(is_message(&first, ELEMENTS, 0.0));
            let wrong = ops::zeros(&[ELEMENTS as i32 + 1], DType::F32);
            expect_refused_from_rank_0(&wrong, ELEMENTS, &group);
            let next = distributed::recv_like(&small, 0, Some(&group));
            assert_eq!(next.to_vec::<f32>().unwrap(), vec![5.0, 6.0]);
            let last = distributed::recv_like(&message(ELEMENTS, 0.0), 0, Some(&group));
            assert!(is_message(&last, ELEMENTS, 3.0));
        }
    });
}

#[test]
fn a_message_not_yet_received_does_not_fail_a_collective_that_waits() {
    // Rank 2's message to rank 0 waits on a connection rank 0's ring sum never reads, while
    // rank 0 waits long for rank 3 (its left neighbour): the message is no sign of a
    // mismatched call, and rank 0 receives it after the sum.
    run_ranks(test_name!(), 4, TIMEOUT, |group| {
        let rank = group.rank();
        let message = ops::full(&[4], 7.0, DType::F32);
        if rank == 2 {
            distributed::send(&message, 0, Some(&group))
                .check()
                .unwrap();
        }
        if rank == 3 {
            std::thread::sleep(Duration::from_millis(300));
        }
        let x = ops::full(&[1 << 16], (rank + 1) as f64, DType::F32);
        let sum = distributed::all_sum(&x, Some(&group))
            .to_vec::<f32>()
            .unwrap();
        assert!(sum.iter().all(|&v| v == 10.0), "rank {rank}");
        if rank == 0 {
            let got = distributed::recv_like(&message, 2, Some(&group));
            assert_eq!(got.to_vec::<f32>().unwrap(), vec![7.0; 4]);
        }
    });
}

/// Messages the channel's slots hold never wait for their receiver (those too large for a post
/// are read from the sender's memory only when the receiver already waits for them), so two
/// ranks may both send before either receives; and a ping-pong of such sizes arrives whole.
#[test]
fn messages_the_slots_hold_may_cross_unreceived_and_go_back_and_forth() {
    const ELEMENTS: [usize; 5] = [
        (20 << 10) / 4 + 1,
        (128 << 10) / 4 + 1,
        (256 << 10) / 4,
        (768 << 10) / 4 + 3,
        (1 << 20) / 4,
    ];
    run_ranks(test_name!(), 2, TIMEOUT, |group| {
        let (me, other) = (group.rank(), 1 - group.rank());
        for (k, &elements) in ELEMENTS.iter().enumerate() {
            // Both send, then both receive: in one evaluation, the send first.
            let shift = (10 * k + me) as f32;
            let sent = distributed::send(&message(elements, shift), other, Some(&group));
            let got = distributed::recv_like(&message(elements, 0.0), other, Some(&group));
            eval(&[sent, got.clone()]).unwrap();
            assert!(
                is_message(&got, elements, (10 * k + other) as f32),
                "crossed {elements}"
            );
            // Then back and forth, each receiver waiting first.
            for round in 0..3 {
                let shift = (100 * k + round) as f32;
                if me == round % 2 {
                    distributed::send(&message(elements, shift), other, Some(&group))
                        .check()
                        .unwrap();
                } else {
                    let got = distributed::recv_like(&message(elements, 0.0), other, Some(&group));
                    assert!(
                        is_message(&got, elements, shift),
                        "round {round} of {elements}"
                    );
                }
            }
        }
    });
}
