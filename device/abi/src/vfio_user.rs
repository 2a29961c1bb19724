//! The vfio-user wire format (the protocol QEMU's `vfio-user-pci` speaks): message header,
//! commands, flags, and the body of each command the NI serves, with the limits the device
//! checks **before** it reads a body. libni's client and the device's server both take
//! them from here.
//!
//! Every message is a 16-byte header, then `size - 16` bytes of body; file descriptors ride
//! on the header as `SCM_RIGHTS`. All integers little-endian.

/// Header: `id: u16, command: u16, size: u32, flags: u32, error: u32`.
pub const HEADER: usize = 16;

pub mod command {
    pub const VERSION: u16 = 1;
    pub const DMA_MAP: u16 = 2;
    pub const DMA_UNMAP: u16 = 3;
    pub const DEVICE_GET_INFO: u16 = 4;
    pub const DEVICE_GET_REGION_INFO: u16 = 5;
    pub const DEVICE_GET_REGION_IO_FDS: u16 = 6;
    pub const DEVICE_GET_IRQ_INFO: u16 = 7;
    pub const DEVICE_SET_IRQS: u16 = 8;
    pub const REGION_READ: u16 = 9;
    pub const REGION_WRITE: u16 = 10;
    pub const DMA_READ: u16 = 11;
    pub const DMA_WRITE: u16 = 12;
    pub const DEVICE_RESET: u16 = 13;
}

pub mod flags {
    /// Bits 0..3: the message type.
    pub const TYPE_MASK: u32 = 0xF;
    pub const TYPE_COMMAND: u32 = 0;
    pub const TYPE_REPLY: u32 = 1;
    /// The sender wants no reply.
    pub const NO_REPLY: u32 = 1 << 4;
    /// A reply that failed; `error` holds an errno.
    pub const ERROR: u32 = 1 << 5;
}

/// Largest data a single REGION_READ/REGION_WRITE carries; announced in the version reply
/// (`max_data_xfer_size`). Larger accesses are refused without being read.
pub const MAX_DATA_XFER: u32 = 1 << 20;
/// Largest version capabilities string accepted (JSON).
pub const MAX_VERSION_JSON: u32 = 4096;
/// Descriptors accepted on one message (SET_IRQS of every MSI-X vector at once).
pub const MAX_MSG_FDS: usize = 16;

/// Body sizes of the fixed-size commands (after the header).
pub const DMA_MAP_BODY: u32 = 32;
pub const DMA_UNMAP_BODY: u32 = 24;
pub const DEVICE_GET_INFO_BODY: u32 = 16;
pub const REGION_INFO_BODY: u32 = 32;
pub const IRQ_INFO_BODY: u32 = 16;
pub const SET_IRQS_BODY: u32 = 20;
pub const REGION_ACCESS_BODY: u32 = 16;
/// Bodies of commands the device does not serve are read (to keep the stream in step) up to
/// this size before the error reply; past it the session ends.
pub const MAX_UNKNOWN_BODY: u32 = 4096;

/// Largest body the device reads for `command`. A header claiming more is answered with an
/// error and the session ends: nothing of the claimed size is ever allocated.
pub fn max_body(command: u16) -> u32 {
    match command {
        command::VERSION => 4 + MAX_VERSION_JSON,
        // argsz may announce a larger struct (bitmaps for dirty tracking): allow slack.
        command::DMA_MAP => DMA_MAP_BODY + 64,
        command::DMA_UNMAP => DMA_UNMAP_BODY + 64,
        command::DEVICE_GET_INFO => DEVICE_GET_INFO_BODY,
        command::DEVICE_GET_REGION_INFO => REGION_INFO_BODY,
        command::DEVICE_GET_IRQ_INFO => IRQ_INFO_BODY,
        // The eventfds travel as descriptors; a data array of u32/bool may follow.
        command::DEVICE_SET_IRQS => SET_IRQS_BODY + 4 * MAX_MSG_FDS as u32,
        command::REGION_READ => REGION_ACCESS_BODY,
        command::REGION_WRITE => REGION_ACCESS_BODY + MAX_DATA_XFER,
        command::DEVICE_RESET => 0,
        _ => MAX_UNKNOWN_BODY,
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub id: u16,
    pub command: u16,
    pub size: u32,
    pub flags: u32,
    pub error: u32,
}

impl Header {
    pub fn decode(b: &[u8; HEADER]) -> Header {
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        Header {
            id: u16_at(0),
            command: u16_at(2),
            size: u32_at(4),
            flags: u32_at(8),
            error: u32_at(12),
        }
    }

    pub fn encode(&self) -> [u8; HEADER] {
        let mut b = [0u8; HEADER];
        b[0..2].copy_from_slice(&self.id.to_le_bytes());
        b[2..4].copy_from_slice(&self.command.to_le_bytes());
        b[4..8].copy_from_slice(&self.size.to_le_bytes());
        b[8..12].copy_from_slice(&self.flags.to_le_bytes());
        b[12..16].copy_from_slice(&self.error.to_le_bytes());
        b
    }

    pub fn no_reply(&self) -> bool {
        self.flags & flags::NO_REPLY != 0
    }

    /// The body length, once the header passed [`Header::check`].
    pub fn body_len(&self) -> usize {
        self.size as usize - HEADER
    }

    /// Whether the header is a command whose body the device will read.
    pub fn check(&self) -> Result<(), ProtocolError> {
        if self.flags & flags::TYPE_MASK != flags::TYPE_COMMAND {
            return Err(ProtocolError::NotACommand(self.flags));
        }
        if (self.size as usize) < HEADER {
            return Err(ProtocolError::ShortSize(self.size));
        }
        let max = max_body(self.command);
        if self.size - HEADER as u32 > max {
            return Err(ProtocolError::TooLarge {
                command: self.command,
                size: self.size,
                max: max + HEADER as u32,
            });
        }
        Ok(())
    }
}

/// A client message the device does not take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("message flags {0:#x} are not a command")]
    NotACommand(u32),
    #[error("message size {0} is shorter than its header")]
    ShortSize(u32),
    #[error("command {command} claims {size} bytes; at most {max} are accepted")]
    TooLarge { command: u16, size: u32, max: u32 },
    #[error("command {command}: body of {len} bytes is too short (needs {need})")]
    ShortBody {
        command: u16,
        len: usize,
        need: usize,
    },
    #[error("REGION_WRITE says {count} bytes but carries {len}")]
    WriteLength { count: u32, len: usize },
    #[error("REGION_READ of {0} bytes: at most {MAX_DATA_XFER} at once")]
    ReadTooLarge(u32),
    #[error("version capabilities are not a NUL-terminated UTF-8 JSON string")]
    BadVersion,
    #[error("command {0} is not served by this device")]
    Unsupported(u16),
}

/// A decoded client command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Version {
        major: u16,
        minor: u16,
        capabilities: String,
    },
    DmaMap {
        flags: u32,
        offset: u64,
        address: u64,
        size: u64,
    },
    DmaUnmap {
        flags: u32,
        address: u64,
        size: u64,
    },
    GetInfo,
    GetRegionInfo {
        argsz: u32,
        index: u32,
    },
    GetIrqInfo {
        index: u32,
    },
    SetIrqs {
        flags: u32,
        index: u32,
        start: u32,
        count: u32,
    },
    RegionRead {
        region: u32,
        offset: u64,
        count: u32,
    },
    RegionWrite {
        region: u32,
        offset: u64,
        data: Vec<u8>,
    },
    Reset,
}

/// DMA_MAP flags.
pub const DMA_MAP_READ: u32 = 1 << 0;
pub const DMA_MAP_WRITE: u32 = 1 << 1;
/// DMA_UNMAP flags.
pub const DMA_UNMAP_ALL: u32 = 1 << 1;

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

/// Decode a command's body (the header passed [`Header::check`]). Pure: the fuzz target.
pub fn decode(command: u16, body: &[u8]) -> Result<Request, ProtocolError> {
    let need = |n: u32| {
        if body.len() < n as usize {
            Err(ProtocolError::ShortBody {
                command,
                len: body.len(),
                need: n as usize,
            })
        } else {
            Ok(())
        }
    };
    Ok(match command {
        command::VERSION => {
            need(4)?;
            let json = &body[4..];
            let json = match json.split_last() {
                Some((0, s)) => s,
                _ if json.is_empty() => json,
                _ => return Err(ProtocolError::BadVersion),
            };
            let capabilities = std::str::from_utf8(json)
                .map_err(|_| ProtocolError::BadVersion)?
                .to_string();
            Request::Version {
                major: u16::from_le_bytes([body[0], body[1]]),
                minor: u16::from_le_bytes([body[2], body[3]]),
                capabilities,
            }
        }
        command::DMA_MAP => {
            need(DMA_MAP_BODY)?;
            Request::DmaMap {
                flags: u32_at(body, 4),
                offset: u64_at(body, 8),
                address: u64_at(body, 16),
                size: u64_at(body, 24),
            }
        }
        command::DMA_UNMAP => {
            need(DMA_UNMAP_BODY)?;
            Request::DmaUnmap {
                flags: u32_at(body, 4),
                address: u64_at(body, 8),
                size: u64_at(body, 16),
            }
        }
        command::DEVICE_GET_INFO => Request::GetInfo,
        command::DEVICE_GET_REGION_INFO => {
            need(12)?;
            Request::GetRegionInfo {
                argsz: u32_at(body, 0),
                index: u32_at(body, 8),
            }
        }
        command::DEVICE_GET_IRQ_INFO => {
            need(12)?;
            Request::GetIrqInfo {
                index: u32_at(body, 8),
            }
        }
        command::DEVICE_SET_IRQS => {
            need(SET_IRQS_BODY)?;
            Request::SetIrqs {
                flags: u32_at(body, 4),
                index: u32_at(body, 8),
                start: u32_at(body, 12),
                count: u32_at(body, 16),
            }
        }
        command::REGION_READ => {
            need(REGION_ACCESS_BODY)?;
            let count = u32_at(body, 12);
            if count > MAX_DATA_XFER {
                return Err(ProtocolError::ReadTooLarge(count));
            }
            Request::RegionRead {
                offset: u64_at(body, 0),
                region: u32_at(body, 8),
                count,
            }
        }
        command::REGION_WRITE => {
            need(REGION_ACCESS_BODY)?;
            let count = u32_at(body, 12);
            let data = &body[REGION_ACCESS_BODY as usize..];
            if data.len() != count as usize {
                return Err(ProtocolError::WriteLength {
                    count,
                    len: data.len(),
                });
            }
            Request::RegionWrite {
                offset: u64_at(body, 0),
                region: u32_at(body, 8),
                data: data.to_vec(),
            }
        }
        command::DEVICE_RESET => Request::Reset,
        other => return Err(ProtocolError::Unsupported(other)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_claiming_more_than_a_command_takes_are_refused_before_any_body() {
        let h = |command, size| Header {
            id: 1,
            command,
            size,
            flags: 0,
            error: 0,
        };
        assert!(h(command::REGION_WRITE, u32::MAX).check().is_err());
        assert!(h(command::REGION_WRITE, 16 + 16 + MAX_DATA_XFER)
            .check()
            .is_ok());
        assert!(h(command::REGION_WRITE, 16 + 17 + MAX_DATA_XFER)
            .check()
            .is_err());
        assert!(h(command::VERSION, 1 << 30).check().is_err());
        assert!(h(command::DMA_MAP, 8).check().is_err());
        assert!(h(999, 16 + MAX_UNKNOWN_BODY + 1).check().is_err());
        let mut reply = h(command::DMA_MAP, 48);
        reply.flags = flags::TYPE_REPLY;
        assert!(reply.check().is_err());
    }

    #[test]
    fn bodies_decode_and_short_or_inconsistent_ones_are_errors() {
        let mut w = Vec::new();
        w.extend_from_slice(&0x1000u64.to_le_bytes());
        w.extend_from_slice(&2u32.to_le_bytes());
        w.extend_from_slice(&3u32.to_le_bytes());
        w.extend_from_slice(b"abc");
        assert_eq!(
            decode(command::REGION_WRITE, &w),
            Ok(Request::RegionWrite {
                region: 2,
                offset: 0x1000,
                data: b"abc".to_vec()
            })
        );
        assert!(decode(command::REGION_WRITE, &w[..18]).is_err());
        assert!(decode(command::DMA_MAP, &[0; 31]).is_err());
        let mut r = w[..16].to_vec();
        r[12..16].copy_from_slice(&(MAX_DATA_XFER + 1).to_le_bytes());
        assert_eq!(
            decode(command::REGION_READ, &r),
            Err(ProtocolError::ReadTooLarge(MAX_DATA_XFER + 1))
        );
        assert_eq!(
            decode(command::VERSION, b"\x00\x00\x01\x00{}\x00"),
            Ok(Request::Version {
                major: 0,
                minor: 1,
                capabilities: "{}".into()
            })
        );
        assert!(decode(command::VERSION, b"\x00\x00\x01\x00{}").is_err());
        assert!(decode(command::VERSION, b"\x00\x00\x01\x00\xff\x00").is_err());
    }
}
