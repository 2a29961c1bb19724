//! Frames between daemons (docs: device/abi/links.md).
//!
//! Every frame is a little-endian header `len: u32, kind: u8, 0: [u8; 3]` and `len` bytes of
//! body: the kind's fixed fields, then for the kinds that carry data, the payload to the end
//! of the body. A peer daemon is another administrator's process on another machine, so
//! everything here is checked on the way in: an unknown kind, a body shorter than its fields,
//! a payload longer than [`CHUNK`] or a frame longer than [`MAX_FRAME`] ends the connection
//! (and is counted), never a panic or an allocation the frame's length chose.

/// `HELLO`'s magic ("NIFL") and the protocol version both sides must speak.
pub const MAGIC: u32 = 0x4c46_494e;
pub const VERSION: u32 = 2;
/// Payload bytes one frame carries at most: larger transfers go as several.
pub const CHUNK: usize = 128 << 10;
/// The header, and the longest frame (header, fields, one chunk; JOIN has the most fields).
pub const HEADER: usize = 8;
pub const MAX_FRAME: usize = HEADER + 256 + CHUNK;

mod kind {
    pub const HELLO: u8 = 1;
    pub const HEARTBEAT: u8 = 2;
    pub const READY: u8 = 3;
    pub const SEND: u8 = 4;
    pub const PULL: u8 = 5;
    pub const DATA: u8 = 6;
    pub const DONE: u8 = 7;
    pub const PUT: u8 = 8;
    pub const GET: u8 = 9;
    pub const REPLY: u8 = 10;
    pub const AM: u8 = 11;
    pub const MQ: u8 = 12;
    pub const QUERY: u8 = 13;
    pub const ANSWER: u8 = 14;
    pub const JOIN: u8 = 15;
    pub const JOIN_DATA: u8 = 16;
    pub const GLOBAL: u8 = 17;
    pub const CHANGE: u8 = 18;
    pub const DOOR: u8 = 19;
    pub const DOOR_ANSWER: u8 = 20;
    pub const QUIET: u8 = 21;
}

/// The register-level doors a `DOOR` frame carries (`fabric/doors.rs`).
pub mod door {
    /// A T3E E-register command (GET/PUT families, atomics, SEND).
    pub const T3E: u8 = 1;
    /// An MLINK operation (READ, WRITE, NOOP, ROP, RESET).
    pub const MLINK: u8 = 2;
    /// A CM-5 Data Network message.
    pub const CM5: u8 = 3;
    /// A Lanai packet through the crossbar.
    pub const LANAI: u8 = 4;
    /// A CM-5 broadcast (message or interrupt) for the receiving host's members.
    pub const CM5_BC: u8 = 5;
    /// A T3E SPUT the sender made to a router: every host applies it to its copy.
    pub const ROUTER: u8 = 6;
}

/// Words a `DOOR` or `DOOR_ANSWER` frame carries at most.
pub const DOOR_WORDS: usize = 16;

/// Combine words a JOIN carries at most.
pub const JOIN_WORDS: usize = 16;

/// What one daemon tells another. NI numbers are physical (fabric-wide); `id` names an
/// operation of the daemon that started it, unique there for the link's life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// First frame each way: who this is, which fabric description it runs, and which run
    /// of its daemon (`epoch`, new at every start: a link without connections tells a
    /// restarted peer by it).
    Hello {
        host: u32,
        digest: u64,
        epoch: u64,
    },
    /// Sent when nothing else was for a while, so silence means a dead peer.
    Heartbeat,
    /// NI `node` of the sender has (or no longer has) a client that takes messages, and its
    /// control-network participation flags.
    Ready {
        node: u32,
        ready: bool,
        flags: u32,
    },
    /// Member `rank` of partition `pid` joined round `seq` of collective `kind` with request
    /// `req` (its 64 bytes), combine `words`, participation `flags`; `payload` is the end of
    /// its contribution (`JoinData` frames before it carry the rest, in order).
    Join {
        pid: u32,
        kind: u8,
        seq: u64,
        rank: u32,
        flags: u32,
        req: Vec<u8>,
        words: Vec<u32>,
        payload: Vec<u8>,
    },
    JoinData {
        pid: u32,
        kind: u8,
        seq: u64,
        rank: u32,
        payload: Vec<u8>,
    },
    /// The partition manager's change number `seq` to the fabric (a control request, JSON:
    /// partitions, map-outs, datelines), for every daemon to apply in order.
    Change {
        seq: u64,
        payload: Vec<u8>,
    },
    /// Member `rank` of partition `pid` set its async global (`sup`: the supervisor's) to `bit`.
    Global {
        pid: u32,
        rank: u32,
        sup: bool,
        bit: bool,
    },
    /// A message from `src` to `dst`. `payload` holds all `len` bytes (eager) or is empty
    /// and the receiver asks for them with `Pull` once a receive matches (rendezvous).
    Send {
        id: u64,
        src: u32,
        dst: u32,
        src_rank: u32,
        tag: u64,
        len: u64,
        eager: bool,
        payload: Vec<u8>,
    },
    /// The receiver of rendezvous send `id` asks for `len` bytes from `offset`.
    Pull {
        id: u64,
        offset: u64,
        len: u32,
    },
    /// Bytes of send `id` from `offset` (answering `Pull`); `status` non-zero: none, failed.
    Data {
        id: u64,
        offset: u64,
        status: u16,
        payload: Vec<u8>,
    },
    /// Send, active message or message-queue SEND `id` was delivered (`len` bytes; `aux`:
    /// the queue's new Tail for MQ) or failed (`status`).
    Done {
        id: u64,
        status: u16,
        dst_rank: u32,
        len: u64,
        aux: u64,
    },
    /// An active message (ROP) for handler `handler` of NI `dst`.
    Am {
        id: u64,
        src: u32,
        dst: u32,
        src_rank: u32,
        handler: u64,
        payload: Vec<u8>,
    },
    /// A T3E message-queue SEND: the 64-byte `payload` into the queue whose MQCW is at
    /// `offset` of region `key` of NI `dst`.
    Mq {
        id: u64,
        src: u32,
        dst: u32,
        key: u32,
        offset: u64,
        payload: Vec<u8>,
    },
    /// An administrator's question about the receiver's NIs (a control request, JSON), and
    /// its answer: how `ni-ctl` on one host shows the whole fabric.
    Query {
        id: u64,
        payload: Vec<u8>,
    },
    Answer {
        id: u64,
        payload: Vec<u8>,
    },
    /// A register-level operation through door `door` ([`door`]) from NI `src` to NI
    /// `dst`: the door's fields in `words`, its data in `payload`. `more`: further `Door`
    /// frames with this `id` carry the rest of the data, in order (a Lanai packet is up to
    /// 16 MiB); only the first carries `words`.
    Door {
        id: u64,
        door: u8,
        src: u32,
        dst: u32,
        more: bool,
        words: Vec<u64>,
        payload: Vec<u8>,
    },
    /// Network-done round `seq` of partition `pid`: every member of the sender has joined it
    /// and none of the messages it counts is in the network any more.
    Quiet {
        pid: u32,
        seq: u64,
    },
    /// What became of `Door` `id`: the door's answer fields and data.
    DoorAnswer {
        id: u64,
        door: u8,
        words: Vec<u64>,
        payload: Vec<u8>,
    },
    /// Write `payload` into region `key` of NI `dst` at `offset`.
    Put {
        id: u64,
        src: u32,
        dst: u32,
        key: u32,
        offset: u64,
        payload: Vec<u8>,
    },
    /// Read `len` bytes of region `key` of NI `dst` from `offset`.
    Get {
        id: u64,
        src: u32,
        dst: u32,
        key: u32,
        offset: u64,
        len: u32,
    },
    /// The answer to `Put` (no payload) or `Get` (the bytes) `id` at `offset`.
    Reply {
        id: u64,
        offset: u64,
        status: u16,
        payload: Vec<u8>,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("frame of {0} bytes is longer than the longest allowed ({MAX_FRAME})")]
    TooLong(usize),
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("frame kind {0} is {1} bytes, shorter than its fields")]
    Short(u8, usize),
    #[error("payload of {0} bytes is longer than a chunk ({CHUNK})")]
    Payload(usize),
}

struct Out<'a>(&'a mut Vec<u8>);

impl Out<'_> {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
}

struct In<'a> {
    b: &'a [u8],
    kind: u8,
}

impl In<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        if self.b.len() < N {
            return Err(WireError::Short(self.kind, self.b.len()));
        }
        let (h, t) = self.b.split_at(N);
        self.b = t;
        Ok(h.try_into().expect("split at N"))
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.take()?))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.take()?))
    }
    /// A count byte and that many u64s, at most [`DOOR_WORDS`].
    fn words(&mut self, k: u8) -> Result<Vec<u64>, WireError> {
        let n = self.u8()? as usize;
        if n > DOOR_WORDS {
            return Err(WireError::Short(k, n));
        }
        (0..n).map(|_| self.u64()).collect()
    }
    fn rest(self) -> Result<Vec<u8>, WireError> {
        if self.b.len() > CHUNK {
            return Err(WireError::Payload(self.b.len()));
        }
        Ok(self.b.to_vec())
    }
}

impl Msg {
    /// Append this frame to `buf`.
    pub fn encode(&self, buf: &mut Vec<u8>) {
        let start = buf.len();
        buf.extend_from_slice(&[0; HEADER]);
        let mut o = Out(buf);
        let (k, payload): (u8, &[u8]) = match self {
            Msg::Hello {
                host,
                digest,
                epoch,
            } => {
                o.u32(MAGIC)
                    .u32(VERSION)
                    .u32(*host)
                    .u64(*digest)
                    .u64(*epoch);
                (kind::HELLO, &[])
            }
            Msg::Heartbeat => (kind::HEARTBEAT, &[]),
            Msg::Ready { node, ready, flags } => {
                o.u32(*node).u8(*ready as u8).u32(*flags);
                (kind::READY, &[])
            }
            Msg::Join {
                pid,
                kind: k,
                seq,
                rank,
                flags,
                req,
                words,
                payload,
            } => {
                debug_assert!(req.len() == 64 && words.len() <= JOIN_WORDS);
                o.u32(*pid).u8(*k).u64(*seq).u32(*rank).u32(*flags);
                o.0.extend_from_slice(req);
                o.u8(words.len() as u8);
                for w in words {
                    o.u32(*w);
                }
                (kind::JOIN, payload)
            }
            Msg::JoinData {
                pid,
                kind: k,
                seq,
                rank,
                payload,
            } => {
                o.u32(*pid).u8(*k).u64(*seq).u32(*rank);
                (kind::JOIN_DATA, payload)
            }
            Msg::Global {
                pid,
                rank,
                sup,
                bit,
            } => {
                o.u32(*pid).u32(*rank).u8(*sup as u8).u8(*bit as u8);
                (kind::GLOBAL, &[])
            }
            Msg::Send {
                id,
                src,
                dst,
                src_rank,
                tag,
                len,
                eager,
                payload,
            } => {
                o.u64(*id)
                    .u32(*src)
                    .u32(*dst)
                    .u32(*src_rank)
                    .u64(*tag)
                    .u64(*len)
                    .u8(*eager as u8);
                (kind::SEND, payload)
            }
            Msg::Pull { id, offset, len } => {
                o.u64(*id).u64(*offset).u32(*len);
                (kind::PULL, &[])
            }
            Msg::Data {
                id,
                offset,
                status,
                payload,
            } => {
                o.u64(*id).u64(*offset).u16(*status);
                (kind::DATA, payload)
            }
            Msg::Done {
                id,
                status,
                dst_rank,
                len,
                aux,
            } => {
                o.u64(*id).u16(*status).u32(*dst_rank).u64(*len).u64(*aux);
                (kind::DONE, &[])
            }
            Msg::Am {
                id,
                src,
                dst,
                src_rank,
                handler,
                payload,
            } => {
                o.u64(*id).u32(*src).u32(*dst).u32(*src_rank).u64(*handler);
                (kind::AM, payload)
            }
            Msg::Mq {
                id,
                src,
                dst,
                key,
                offset,
                payload,
            } => {
                o.u64(*id).u32(*src).u32(*dst).u32(*key).u64(*offset);
                (kind::MQ, payload)
            }
            Msg::Put {
                id,
                src,
                dst,
                key,
                offset,
                payload,
            } => {
                o.u64(*id).u32(*src).u32(*dst).u32(*key).u64(*offset);
                (kind::PUT, payload)
            }
            Msg::Query { id, payload } => {
                o.u64(*id);
                (kind::QUERY, payload)
            }
            Msg::Door {
                id,
                door,
                src,
                dst,
                more,
                words,
                payload,
            } => {
                debug_assert!(words.len() <= DOOR_WORDS);
                o.u64(*id).u8(*door).u32(*src).u32(*dst).u8(*more as u8);
                o.u8(words.len() as u8);
                for w in words {
                    o.u64(*w);
                }
                (kind::DOOR, payload)
            }
            Msg::Quiet { pid, seq } => {
                o.u32(*pid).u64(*seq);
                (kind::QUIET, &[])
            }
            Msg::DoorAnswer {
                id,
                door,
                words,
                payload,
            } => {
                debug_assert!(words.len() <= DOOR_WORDS);
                o.u64(*id).u8(*door).u8(words.len() as u8);
                for w in words {
                    o.u64(*w);
                }
                (kind::DOOR_ANSWER, payload)
            }
            Msg::Change { seq, payload } => {
                o.u64(*seq);
                (kind::CHANGE, payload)
            }
            Msg::Answer { id, payload } => {
                o.u64(*id);
                (kind::ANSWER, payload)
            }
            Msg::Get {
                id,
                src,
                dst,
                key,
                offset,
                len,
            } => {
                o.u64(*id)
                    .u32(*src)
                    .u32(*dst)
                    .u32(*key)
                    .u64(*offset)
                    .u32(*len);
                (kind::GET, &[])
            }
            Msg::Reply {
                id,
                offset,
                status,
                payload,
            } => {
                o.u64(*id).u64(*offset).u16(*status);
                (kind::REPLY, payload)
            }
        };
        debug_assert!(payload.len() <= CHUNK, "callers split payloads into chunks");
        buf.extend_from_slice(payload);
        let body = (buf.len() - start - HEADER) as u32;
        buf[start..start + 4].copy_from_slice(&body.to_le_bytes());
        buf[start + 4] = k;
    }

    /// The length of the frame at the start of `buf`, once its header is there.
    pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, WireError> {
        if buf.len() < HEADER {
            return Ok(None);
        }
        let body = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
        let len = HEADER.saturating_add(body);
        if len > MAX_FRAME {
            return Err(WireError::TooLong(len));
        }
        Ok(Some(len))
    }

    /// Decode one whole frame (as long as [`Msg::frame_len`] said).
    pub fn decode(frame: &[u8]) -> Result<Msg, WireError> {
        let k = frame[4];
        let mut i = In {
            b: &frame[HEADER..],
            kind: k,
        };
        let m = match k {
            kind::HELLO => {
                let (magic, version) = (i.u32()?, i.u32()?);
                if magic != MAGIC || version != VERSION {
                    // Not ours, or a version we do not speak: as unknown as a bad kind.
                    return Err(WireError::UnknownKind(k));
                }
                Msg::Hello {
                    host: i.u32()?,
                    digest: i.u64()?,
                    epoch: i.u64()?,
                }
            }
            kind::HEARTBEAT => Msg::Heartbeat,
            kind::READY => Msg::Ready {
                node: i.u32()?,
                ready: i.u8()? != 0,
                flags: i.u32()?,
            },
            kind::JOIN => {
                let (pid, k, seq, rank, flags) = (i.u32()?, i.u8()?, i.u64()?, i.u32()?, i.u32()?);
                let req = i.take::<64>()?.to_vec();
                let n = i.u8()? as usize;
                if n > JOIN_WORDS {
                    return Err(WireError::Short(kind::JOIN, n));
                }
                let words = (0..n).map(|_| i.u32()).collect::<Result<Vec<u32>, _>>()?;
                Msg::Join {
                    pid,
                    kind: k,
                    seq,
                    rank,
                    flags,
                    req,
                    words,
                    payload: i.rest()?,
                }
            }
            kind::JOIN_DATA => Msg::JoinData {
                pid: i.u32()?,
                kind: i.u8()?,
                seq: i.u64()?,
                rank: i.u32()?,
                payload: i.rest()?,
            },
            kind::GLOBAL => Msg::Global {
                pid: i.u32()?,
                rank: i.u32()?,
                sup: i.u8()? != 0,
                bit: i.u8()? != 0,
            },
            kind::SEND => Msg::Send {
                id: i.u64()?,
                src: i.u32()?,
                dst: i.u32()?,
                src_rank: i.u32()?,
                tag: i.u64()?,
                len: i.u64()?,
                eager: i.u8()? != 0,
                payload: i.rest()?,
            },
            kind::PULL => Msg::Pull {
                id: i.u64()?,
                offset: i.u64()?,
                len: i.u32()?,
            },
            kind::DATA => Msg::Data {
                id: i.u64()?,
                offset: i.u64()?,
                status: i.u16()?,
                payload: i.rest()?,
            },
            kind::DONE => Msg::Done {
                id: i.u64()?,
                status: i.u16()?,
                dst_rank: i.u32()?,
                len: i.u64()?,
                aux: i.u64()?,
            },
            kind::AM => Msg::Am {
                id: i.u64()?,
                src: i.u32()?,
                dst: i.u32()?,
                src_rank: i.u32()?,
                handler: i.u64()?,
                payload: i.rest()?,
            },
            kind::MQ => Msg::Mq {
                id: i.u64()?,
                src: i.u32()?,
                dst: i.u32()?,
                key: i.u32()?,
                offset: i.u64()?,
                payload: i.rest()?,
            },
            kind::PUT => Msg::Put {
                id: i.u64()?,
                src: i.u32()?,
                dst: i.u32()?,
                key: i.u32()?,
                offset: i.u64()?,
                payload: i.rest()?,
            },
            kind::DOOR => {
                let (id, door, src, dst, more) = (i.u64()?, i.u8()?, i.u32()?, i.u32()?, i.u8()?);
                let words = i.words(kind::DOOR)?;
                Msg::Door {
                    id,
                    door,
                    src,
                    dst,
                    more: more != 0,
                    words,
                    payload: i.rest()?,
                }
            }
            kind::QUIET => Msg::Quiet {
                pid: i.u32()?,
                seq: i.u64()?,
            },
            kind::DOOR_ANSWER => {
                let (id, door) = (i.u64()?, i.u8()?);
                let words = i.words(kind::DOOR_ANSWER)?;
                Msg::DoorAnswer {
                    id,
                    door,
                    words,
                    payload: i.rest()?,
                }
            }
            kind::QUERY => Msg::Query {
                id: i.u64()?,
                payload: i.rest()?,
            },
            kind::CHANGE => Msg::Change {
                seq: i.u64()?,
                payload: i.rest()?,
            },
            kind::ANSWER => Msg::Answer {
                id: i.u64()?,
                payload: i.rest()?,
            },
            kind::GET => Msg::Get {
                id: i.u64()?,
                src: i.u32()?,
                dst: i.u32()?,
                key: i.u32()?,
                offset: i.u64()?,
                len: i.u32()?,
            },
            kind::REPLY => Msg::Reply {
                id: i.u64()?,
                offset: i.u64()?,
                status: i.u16()?,
                payload: i.rest()?,
            },
            other => return Err(WireError::UnknownKind(other)),
        };
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Msg> {
        vec![
            Msg::Hello {
                host: 3,
                digest: 77,
                epoch: 5,
            },
            Msg::Heartbeat,
            Msg::Ready {
                node: 9,
                ready: true,
                flags: 3,
            },
            Msg::Join {
                pid: 1,
                kind: 2,
                seq: 3,
                rank: 4,
                flags: 5,
                req: vec![6; 64],
                words: vec![7, 8],
                payload: vec![9; 10],
            },
            Msg::JoinData {
                pid: 1,
                kind: 2,
                seq: 3,
                rank: 4,
                payload: vec![1; CHUNK],
            },
            Msg::Global {
                pid: 1,
                rank: 2,
                sup: true,
                bit: false,
            },
            Msg::Send {
                id: 1,
                src: 2,
                dst: 5,
                src_rank: 1,
                tag: u64::MAX,
                len: 4,
                eager: true,
                payload: vec![1, 2, 3, 4],
            },
            Msg::Pull {
                id: 1,
                offset: 8,
                len: 100,
            },
            Msg::Door {
                id: 4,
                door: door::LANAI,
                src: 1,
                dst: 2,
                more: true,
                words: vec![u64::MAX, 3],
                payload: vec![5; 33],
            },
            Msg::Quiet { pid: 7, seq: 9 },
            Msg::DoorAnswer {
                id: 4,
                door: door::T3E,
                words: vec![1; DOOR_WORDS],
                payload: vec![],
            },
            Msg::Data {
                id: 1,
                offset: 8,
                status: 0,
                payload: vec![7; CHUNK],
            },
            Msg::Done {
                id: 1,
                status: 8,
                dst_rank: 2,
                len: 9,
                aux: 4,
            },
            Msg::Am {
                id: 4,
                src: 1,
                dst: 2,
                src_rank: 0,
                handler: 3,
                payload: vec![5; 100],
            },
            Msg::Query {
                id: 6,
                payload: b"{}".to_vec(),
            },
            Msg::Change {
                seq: 7,
                payload: b"{}".to_vec(),
            },
            Msg::Answer {
                id: 6,
                payload: b"[]".to_vec(),
            },
            Msg::Mq {
                id: 5,
                src: 1,
                dst: 2,
                key: 7,
                offset: 64,
                payload: vec![6; 64],
            },
            Msg::Put {
                id: 2,
                src: 0,
                dst: 4,
                key: 1,
                offset: 0,
                payload: vec![9; 3],
            },
            Msg::Get {
                id: 3,
                src: 0,
                dst: 4,
                key: 1,
                offset: 5,
                len: 6,
            },
            Msg::Reply {
                id: 3,
                offset: 5,
                status: 0,
                payload: vec![1; 6],
            },
        ]
    }

    #[test]
    fn every_frame_decodes_to_itself_back_to_back() {
        let mut buf = Vec::new();
        for m in all() {
            m.encode(&mut buf);
        }
        let mut at = 0;
        for m in all() {
            let n = Msg::frame_len(&buf[at..]).unwrap().unwrap();
            assert_eq!(Msg::decode(&buf[at..at + n]).unwrap(), m);
            at += n;
        }
        assert_eq!(at, buf.len());
    }

    #[test]
    fn the_fullest_frame_of_every_kind_fits() {
        let full = vec![0u8; CHUNK];
        for m in [
            Msg::Door {
                id: u64::MAX,
                door: u8::MAX,
                src: u32::MAX,
                dst: u32::MAX,
                more: true,
                words: vec![u64::MAX; DOOR_WORDS],
                payload: full.clone(),
            },
            Msg::DoorAnswer {
                id: u64::MAX,
                door: u8::MAX,
                words: vec![u64::MAX; DOOR_WORDS],
                payload: full.clone(),
            },
            Msg::Join {
                pid: u32::MAX,
                kind: 1,
                seq: u64::MAX,
                rank: u32::MAX,
                flags: u32::MAX,
                req: vec![0; 64],
                words: vec![0; JOIN_WORDS],
                payload: full.clone(),
            },
            Msg::Send {
                id: 0,
                src: 0,
                dst: 0,
                src_rank: 0,
                tag: 0,
                len: CHUNK as u64,
                eager: true,
                payload: full.clone(),
            },
            Msg::Put {
                id: 0,
                src: 0,
                dst: 0,
                key: 0,
                offset: 0,
                payload: full.clone(),
            },
        ] {
            let mut b = Vec::new();
            m.encode(&mut b);
            assert_eq!(Msg::frame_len(&b), Ok(Some(b.len())));
            assert_eq!(Msg::decode(&b).unwrap(), m);
        }
    }

    #[test]
    fn hostile_frames_are_errors_not_panics() {
        // Every truncation of every frame's body: an error or a different valid frame.
        for m in all() {
            let mut buf = Vec::new();
            m.encode(&mut buf);
            for cut in HEADER..buf.len() {
                let mut f = buf[..cut].to_vec();
                let body = (cut - HEADER) as u32;
                f[..4].copy_from_slice(&body.to_le_bytes());
                let _ = Msg::decode(&f);
            }
        }
        let mut long = vec![0u8; HEADER];
        long[..4].copy_from_slice(&(MAX_FRAME as u32).to_le_bytes());
        assert!(matches!(Msg::frame_len(&long), Err(WireError::TooLong(_))));
        long[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(Msg::frame_len(&long), Err(WireError::TooLong(_))));
        let mut bad = vec![0u8; HEADER];
        bad[4] = 200;
        assert_eq!(Msg::decode(&bad), Err(WireError::UnknownKind(200)));
        let mut hello = Vec::new();
        Msg::Hello {
            host: 0,
            digest: 0,
            epoch: 0,
        }
        .encode(&mut hello);
        hello[HEADER] ^= 1;
        assert!(Msg::decode(&hello).is_err(), "a wrong magic is refused");
        let mut short = Vec::new();
        Msg::Pull {
            id: 1,
            offset: 2,
            len: 3,
        }
        .encode(&mut short);
        short.truncate(short.len() - 1);
        let body = (short.len() - HEADER) as u32;
        short[..4].copy_from_slice(&body.to_le_bytes());
        assert!(matches!(Msg::decode(&short), Err(WireError::Short(..))));
    }
}
