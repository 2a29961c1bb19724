//! The control-socket connection: one JSON request line out, one JSON response line back.

use std::fmt;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, Result};
use ni_abi::control::{Envelope, Request, Response, PROTOCOL_VERSION};

/// A daemon that does not answer within this long is as good as unreachable; without a
/// limit a wedged daemon would hang every script that asks it something.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// The daemon could not be reached (exit code 3).
#[derive(Debug)]
pub struct Unreachable {
    pub path: PathBuf,
    pub why: std::io::Error,
}

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot reach ni-device at {}: is it running? (start it with `ni-device --run-dir {}`, or point ni-ctl at its directory with --run-dir or NI_RUN_DIR)",
            self.path.display(),
            self.path.parent().unwrap_or(Path::new(".")).display()
        )
    }
}

impl std::error::Error for Unreachable {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.why)
    }
}

/// The daemon answered with an error (exit code 1).
#[derive(Debug)]
pub struct DaemonError(pub String);

impl fmt::Display for DaemonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ni-device: {}", self.0)
    }
}

impl std::error::Error for DaemonError {}

pub struct Client {
    path: PathBuf,
    stream: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Client {
    pub fn connect(run_dir: &Path) -> Result<Client> {
        let path = run_dir.join("control.sock");
        let unreachable = |why| Unreachable {
            path: path.clone(),
            why,
        };
        let stream = UnixStream::connect(&path).map_err(unreachable)?;
        stream
            .set_read_timeout(Some(REPLY_TIMEOUT))
            .map_err(unreachable)?;
        let reader = BufReader::new(stream.try_clone().map_err(unreachable)?);
        Ok(Client {
            path,
            stream,
            reader,
        })
    }

    fn lost(&self, why: std::io::Error) -> anyhow::Error {
        Unreachable {
            path: self.path.clone(),
            why,
        }
        .into()
    }

    /// Send one request that takes the daemon up to `work` to carry out (a diagnostic that
    /// runs for a while): the reply may take that much longer than usual.
    pub fn call_long(&mut self, request: Request, work: Duration) -> Result<Response> {
        self.stream
            .set_read_timeout(Some(REPLY_TIMEOUT + work))
            .map_err(|e| self.lost(e))?;
        let r = self.call(request);
        let _ = self.stream.set_read_timeout(Some(REPLY_TIMEOUT));
        r
    }

    /// Send one request; a daemon error comes back as [`DaemonError`].
    pub fn call(&mut self, request: Request) -> Result<Response> {
        let mut line = serde_json::to_string(&Envelope {
            version: PROTOCOL_VERSION,
            body: request,
        })?;
        line.push('\n');
        let mut reply = String::new();
        if let Err(e) = self.stream.write_all(line.as_bytes()) {
            // A daemon that refuses the connection (another user's) answers why and hangs
            // up before reading: the reason may be waiting even though the write failed.
            return match self.reader.read_line(&mut reply) {
                Ok(n) if n > 0 => self.decode(&reply),
                _ => Err(self.lost(e)),
            };
        }
        let n = self
            .reader
            .read_line(&mut reply)
            .map_err(|e| self.lost(e))?;
        if n == 0 {
            return Err(self.lost(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the daemon closed the connection without answering",
            )));
        }
        self.decode(&reply)
    }

    fn decode(&self, reply: &str) -> Result<Response> {
        let env: Envelope<Response> = serde_json::from_str(reply).map_err(|e| {
            anyhow!(
                "ni-device sent a reply this ni-ctl does not understand ({e}); are both from the same build?\n  reply: {}",
                reply.trim_end()
            )
        })?;
        match env.body {
            Response::Error { error } => Err(DaemonError(error).into()),
            _ if env.version != PROTOCOL_VERSION => Err(anyhow!(
                "ni-device speaks control protocol version {}, this ni-ctl speaks {PROTOCOL_VERSION}",
                env.version
            )),
            body => Ok(body),
        }
    }
}
