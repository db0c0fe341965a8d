//! Property tests: every request and response survives encode → frame → decode, and arbitrary
//! bytes never make the decoders panic.

use bytes::{Bytes, BytesMut};
use minibroker_protocol::{
    AlterTopicConfigsRequest, ConfigOrigin, CreateTopicWithRequest, FetchResponse, FrameCodec,
    Outcome, ProduceRequest, ProduceResponse, Request, Response, TopicConfig, TopicConfigChange,
    TopicConfigsResponse, TopicRequest, TopicSetting, codec,
};
use minibroker_records::{NewRecord, Writer};
use proptest::prelude::*;
use tokio_util::codec::{Decoder, Encoder};

proptest! {
    #[test]
    fn produce_requests_round_trip(
        topic in "[a-z]{1,12}",
        partition in any::<u32>(),
        batch in prop::collection::vec(any::<u8>(), 0..256),
        correlation_id in any::<u32>(),
    ) {
        let request = Request::Produce(ProduceRequest {
            topic: &topic,
            partition,
            batch: serde_bytes::Bytes::new(&batch),
        });
        let mut codec = FrameCodec::default();
        let mut stream = BytesMut::new();
        codec.encode((correlation_id, &request), &mut stream).unwrap();
        let body = codec.decode(&mut stream).unwrap().unwrap();
        prop_assert_eq!(codec::decode_request(&body).unwrap(), (correlation_id, request));
    }

    #[test]
    fn fetch_responses_round_trip(
        offsets in prop::collection::vec(0i64..1_000_000, 0..5),
        outcome in prop_oneof![Just(Outcome::Accepted), Just(Outcome::Duplicate), Just(Outcome::OutOfOrder), Just(Outcome::FencedEpoch)],
    ) {
        let fetch = Response::Fetch(FetchResponse {
            high_watermark: 99,
            log_start_offset: 0,
            batches: offsets.iter().map(|&o| Bytes::from(o.to_string())).collect(),
        });
        let produce = Response::Produce(ProduceResponse { outcome, base_offset: offsets.first().copied() });
        for response in [fetch, produce] {
            let body = codec::encode_body(1, &response).unwrap();
            prop_assert_eq!(codec::decode_response(&body).unwrap(), (1, response));
        }
    }

    #[test]
    fn topic_config_requests_and_answers_round_trip(
        topic in "[a-z]{1,12}",
        settings in prop::collection::vec(("[a-z.]{1,16}", "-?[0-9a-z]{0,8}"), 0..4),
        partitions in any::<u32>(),
    ) {
        let pairs: Vec<TopicSetting> = settings
            .iter()
            .map(|(name, value)| TopicSetting { name, value })
            .collect();
        let changes: Vec<TopicConfigChange> = pairs
            .iter()
            .enumerate()
            .map(|(i, setting)| if i % 2 == 0 {
                TopicConfigChange::Set(*setting)
            } else {
                TopicConfigChange::Delete(setting.name)
            })
            .collect();
        let requests = [
            Request::CreateTopicWith(CreateTopicWithRequest {
                topic: &topic,
                partitions,
                settings: pairs.clone(),
            }),
            Request::DescribeTopicConfigs(TopicRequest { topic: &topic }),
            Request::AlterTopicConfigs(AlterTopicConfigsRequest { topic: &topic, changes }),
        ];
        for request in requests {
            let body = codec::encode_body(7, &request).unwrap();
            prop_assert_eq!(codec::decode_request(&body).unwrap(), (7, request));
        }
        let origins = [ConfigOrigin::Topic, ConfigOrigin::Broker, ConfigOrigin::Default];
        let answer = Response::TopicConfigs(TopicConfigsResponse {
            topic: topic.clone(),
            configs: settings
                .iter()
                .zip(origins.iter().cycle())
                .map(|((name, value), &source)| TopicConfig {
                    name: name.clone(),
                    value: value.clone(),
                    source,
                })
                .collect(),
        });
        let body = codec::encode_body(8, &answer).unwrap();
        prop_assert_eq!(codec::decode_response(&body).unwrap(), (8, answer));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = codec::decode_request(&bytes);
        let _ = codec::decode_response(&bytes);
        let mut codec = FrameCodec::new(64);
        let mut src = BytesMut::from(&bytes[..]);
        while let Ok(Some(_)) = codec.decode(&mut src) {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// Structure-aware: a valid request carrying a real batch, with bytes of its message
    /// overwritten, still decodes to a request or to an error carrying its correlation id, and
    /// never panics.
    #[test]
    fn mutated_valid_requests_keep_their_correlation_id(
        topic in "[a-z.]{1,12}",
        partition in any::<u32>(),
        producer_id in any::<i64>(),
        sequence in 0i32..i32::MAX,
        values in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..16), 1..4),
        correlation_id in any::<u32>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let writer = Writer { producer_id, epoch: 0, base_sequence: sequence };
        let records: Vec<NewRecord> = values.into_iter().map(NewRecord::value).collect();
        let batch = minibroker_records::encode(writer, &records, 0).unwrap();
        let request = Request::Produce(ProduceRequest {
            topic: &topic,
            partition,
            batch: serde_bytes::Bytes::new(&batch),
        });
        let mut body = codec::encode_body(correlation_id, &request).unwrap().to_vec();
        let message_len = body.len() - 5;
        for (index, byte) in edits {
            body[5 + index.index(message_len)] = byte;
        }
        if truncate {
            body.truncate(5 + cut.index(message_len));
        }
        match codec::decode_request(&body) {
            Ok((id, _)) => prop_assert_eq!(id, correlation_id),
            Err(bad) => prop_assert_eq!(bad.correlation_id, Some(correlation_id)),
        }
    }
}
