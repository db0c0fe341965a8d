//! Kafka Produce (v3-v12), read in place from the request frame and answered straight into the
//! connection's output: the one Kafka message this crate does not decode and encode with
//! `kafka-protocol`.
//!
//! Why: Produce is the hot path, and small requests are what the crate's owned decoding costs
//! most on. For one record of 100 B per request, `kafka-protocol`'s decode (an owned request:
//! arrays, checked strings, a map of tagged fields per level, each allocated and then dropped,
//! and its request header's owned client id) and the build and encode of the answer were
//! together about 0.35-0.4 µs of the front end's 0.82-0.89 µs per request
//! (`cargo bench -p minibroker-kafka`), and held the Kafka path to 0.50-0.55 of the do-nothing
//! baseline over TCP. This reader borrows every string and batch from the frame and allocates
//! two small vectors per request (its topics, its partitions); the writer writes the answer's
//! bytes with no intermediate message.
//! Figures with it are in docs/performance.md ("The Kafka path").
//!
//! It is held to the crate by a differential property test (`tests/produce_wire.rs`): every
//! request the crate encodes, at every version served, reads to the same fields; every damaged
//! request this reader accepts, the crate decodes to the same fields; every answer written
//! decodes with the crate to the answer meant. The fuzz corpus of the front end
//! (`tests/tests/decoders.rs`) runs its mutations through it.

use bytes::{BufMut, BytesMut};
use minibroker_net::framing::{FrameStart, MAX_LENGTH};

/// Why a Produce request could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// The request ends before a field it must hold.
    #[error("the request ends early")]
    Truncated,
    /// A length or count is negative where null is not allowed, or larger than the bytes left.
    #[error("a length or count is out of range")]
    BadLength,
    /// A string is not UTF-8.
    #[error("a string is not UTF-8")]
    NotUtf8,
    /// A variable-length integer runs over five bytes.
    #[error("a varint is too long")]
    BadVarint,
}

/// The fields of a Produce request the broker uses, borrowed from its frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceView<'a> {
    /// The request header's correlation id.
    pub correlation_id: i32,
    /// Set for a transactional producer's request.
    pub transactional_id: Option<&'a str>,
    /// -1 (all), 0 (none: no answer) or 1; anything else is refused per partition.
    pub acks: i16,
    /// How long the producer waits (the broker answers once the batches are stored).
    pub timeout_ms: i32,
    /// Every partition of every topic, in the request's order.
    pub partitions: Vec<PartitionData<'a>>,
    /// Topics in the request (some may have no partitions).
    pub topics: Vec<&'a str>,
}

/// One partition's data in a Produce request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionData<'a> {
    /// Its topic's place in [`ProduceView::topics`].
    pub topic: usize,
    /// The partition's index in its topic, as the request has it (negative ones are refused).
    pub index: i32,
    /// The record batches; `None` when the request holds null.
    pub records: Option<&'a [u8]>,
}

/// Reads a Produce request frame (request header included) of `version`, which must be one
/// served (3-12; from 9 they are flexible, and 10-12 add only tagged fields and semantics). Bytes after the request are ignored, as the crate
/// ignores them.
///
/// # Errors
/// [`Malformed`] for a frame that is not a whole Produce request of that version.
pub fn read(frame: &[u8], version: i16) -> Result<ProduceView<'_>, Malformed> {
    let flexible = version >= 9;
    let mut r = Reader {
        bytes: frame,
        flexible,
    };
    // Request header v1, or v2 when flexible: the client id is a plain nullable string in both.
    r.take(4)?; // API key and version, already peeked
    let correlation_id = r.i32()?;
    let client_id = r.i16()?;
    if client_id >= 0 {
        r.utf8(client_id as usize)?;
    } else if client_id != -1 {
        return Err(Malformed::BadLength);
    }
    if flexible {
        r.tags()?;
    }
    let transactional_id = r.nullable_string()?;
    let acks = r.i16()?;
    let timeout_ms = r.i32()?;
    // A topic takes at least 2 bytes in the frame (an empty name and an empty partition array
    // when flexible), a partition at least 5; counts are bounded by that, so a hostile count
    // allocates nothing it could not fill.
    let topic_count = r.array_len(2)?;
    let mut topics = Vec::with_capacity(topic_count);
    let mut partitions = Vec::new();
    for topic in 0..topic_count {
        topics.push(r.string()?);
        let count = r.array_len(5)?;
        partitions.reserve(count);
        for _ in 0..count {
            let index = r.i32()?;
            let records = r.nullable_bytes()?;
            if flexible {
                r.tags()?;
            }
            partitions.push(PartitionData {
                topic,
                index,
                records,
            });
        }
        if flexible {
            r.tags()?;
        }
    }
    if flexible {
        r.tags()?;
    }
    Ok(ProduceView {
        correlation_id,
        transactional_id,
        acks,
        timeout_ms,
        partitions,
        topics,
    })
}

struct Reader<'a> {
    bytes: &'a [u8],
    flexible: bool,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        let Some((taken, rest)) = self.bytes.split_at_checked(n) else {
            return Err(Malformed::Truncated);
        };
        self.bytes = rest;
        Ok(taken)
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn i16(&mut self) -> Result<i16, Malformed> {
        self.fixed().map(i16::from_be_bytes)
    }

    fn i32(&mut self) -> Result<i32, Malformed> {
        self.fixed().map(i32::from_be_bytes)
    }

    /// A u32 varint of at most 5 bytes; bits past the 32nd are dropped, as `kafka-protocol`
    /// drops them.
    fn uvarint(&mut self) -> Result<u32, Malformed> {
        let mut at = 0;
        match minibroker_records::varint::unsigned(self.bytes, &mut at, 5) {
            Some(value) => {
                self.bytes = &self.bytes[at..];
                Ok(value as u32)
            }
            // The bytes ran out before the varint ended.
            None if self.bytes.len() < 5 && self.bytes.iter().all(|byte| byte & 0x80 != 0) => {
                Err(Malformed::Truncated)
            }
            None => Err(Malformed::BadVarint),
        }
    }

    fn utf8(&mut self, len: usize) -> Result<&'a str, Malformed> {
        std::str::from_utf8(self.take(len)?).map_err(|_| Malformed::NotUtf8)
    }

    /// A length: `None` for null. Plain forms are an `i16` (strings) or an `i32` (bytes) with
    /// -1 for null; compact forms a varint of the length plus one, 0 for null.
    fn length(&mut self, wide: bool) -> Result<Option<usize>, Malformed> {
        let length = if self.flexible {
            i64::from(self.uvarint()?) - 1
        } else if wide {
            i64::from(self.i32()?)
        } else {
            i64::from(self.i16()?)
        };
        match length {
            -1 => Ok(None),
            n if n < 0 => Err(Malformed::BadLength),
            n => usize::try_from(n)
                .map(Some)
                .map_err(|_| Malformed::BadLength),
        }
    }

    fn nullable_string(&mut self) -> Result<Option<&'a str>, Malformed> {
        match self.length(false)? {
            Some(len) => self.utf8(len).map(Some),
            None => Ok(None),
        }
    }

    fn string(&mut self) -> Result<&'a str, Malformed> {
        self.nullable_string()?.ok_or(Malformed::BadLength)
    }

    fn nullable_bytes(&mut self) -> Result<Option<&'a [u8]>, Malformed> {
        match self.length(true)? {
            Some(len) => self.take(len).map(Some),
            None => Ok(None),
        }
    }

    /// An array's element count (never null here), at most what the bytes left can hold at
    /// `min_size` bytes an element.
    fn array_len(&mut self, min_size: usize) -> Result<usize, Malformed> {
        let count = if self.flexible {
            usize::try_from(self.uvarint()?)
                .map_err(|_| Malformed::BadLength)?
                .checked_sub(1)
                .ok_or(Malformed::BadLength)?
        } else {
            usize::try_from(self.i32()?).map_err(|_| Malformed::BadLength)?
        };
        if count > self.bytes.len() / min_size {
            return Err(Malformed::BadLength);
        }
        Ok(count)
    }

    /// Tagged fields: none is known at any level of Produce v9, so each is skipped.
    fn tags(&mut self) -> Result<(), Malformed> {
        let count = self.uvarint()?;
        for _ in 0..count {
            self.uvarint()?; // tag
            let size = self.uvarint()? as usize;
            self.take(size)?;
        }
        Ok(())
    }
}

/// One partition's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionAnswer {
    /// The partition answered.
    pub index: i32,
    /// 0, or Kafka's error code.
    pub error_code: i16,
    /// The offset of the first record stored, or -1.
    pub base_offset: i64,
    /// Written from v5 on.
    pub log_start_offset: i64,
    /// Written from v8 on.
    pub error_message: Option<String>,
}

/// Appends the whole answer frame (length, response header, body) of a Produce of `version`
/// (3-12) to `out` (the tagged fields of 10 and later, a new leader's address, are left out:
/// this broker leads every partition): `answers[i]` answers `request.partitions[i]`, grouped under their topics as
/// the request had them. Nothing written can fail: each length is bounded by the request's.
pub fn write_answer(
    out: &mut BytesMut,
    request: &ProduceView<'_>,
    answers: &[PartitionAnswer],
    version: i16,
) {
    debug_assert_eq!(answers.len(), request.partitions.len());
    let flexible = version >= 9;
    let mut w = Writer { out, flexible };
    let frame = FrameStart::begin(w.out);
    w.out.put_i32(request.correlation_id);
    w.no_tags(); // response header v1 when flexible
    w.array_len(request.topics.len());
    let mut next = 0;
    for (ordinal, topic) in request.topics.iter().enumerate() {
        let count = request.partitions[next..]
            .iter()
            .take_while(|p| p.topic == ordinal)
            .count();
        w.string(Some(topic));
        w.array_len(count);
        for answer in answers.iter().skip(next).take(count) {
            w.out.put_i32(answer.index);
            w.out.put_i16(answer.error_code);
            w.out.put_i64(answer.base_offset);
            w.out.put_i64(-1); // log append time: the broker stamps CreateTime
            if version >= 5 {
                w.out.put_i64(answer.log_start_offset);
            }
            if version >= 8 {
                w.array_len(0); // record errors
                w.string(answer.error_message.as_deref());
            }
            w.no_tags();
        }
        w.no_tags();
        next += count;
    }
    w.out.put_i32(0); // throttle time
    w.no_tags();
    // Bounded by the request's own length, itself a frame.
    let _fits = frame.end(w.out, MAX_LENGTH);
}

struct Writer<'a> {
    out: &'a mut BytesMut,
    flexible: bool,
}

impl Writer<'_> {
    fn uvarint(&mut self, mut value: u32) {
        while value >= 0x80 {
            self.out.put_u8((value as u8 & 0x7f) | 0x80);
            value >>= 7;
        }
        self.out.put_u8(value as u8);
    }

    /// An array's count; every count here is below `i32::MAX` (it counts a request's parts).
    fn array_len(&mut self, count: usize) {
        if self.flexible {
            self.uvarint(count as u32 + 1);
        } else {
            self.out.put_i32(count as i32);
        }
    }

    /// A nullable string. Every string written fits its form: topic names come from the
    /// request in the same form, messages are short (one too long for the plain form would be
    /// written as null rather than cut).
    fn string(&mut self, value: Option<&str>) {
        let value = value.filter(|text| self.flexible || text.len() <= i16::MAX as usize);
        match (value, self.flexible) {
            (None, true) => self.uvarint(0),
            (None, false) => self.out.put_i16(-1),
            (Some(text), true) => self.uvarint(text.len() as u32 + 1),
            (Some(text), false) => self.out.put_i16(text.len() as i16),
        }
        if let Some(text) = value {
            self.out.put_slice(text.as_bytes());
        }
    }

    fn no_tags(&mut self) {
        if self.flexible {
            self.out.put_u8(0);
        }
    }
}
