//! The poller's state across a daemon handover (`crate::handover`): what clients and the
//! administrator built (rings, regions, waiting messages and receives, partitions, the torus,
//! collective rounds, copies in progress) carried by value; the windows by descriptor.
//! Caches (routes) and hold timers start again.

use std::collections::HashMap;
use std::fs::File;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::node::Node;
use super::window::{Window, WindowImage};
use super::State;
use crate::server::lock;

#[derive(serde::Serialize, serde::Deserialize)]
pub struct FabricImage {
    pub nodes: serde_json::Value,
    pub partitions: serde_json::Value,
    pub colls: serde_json::Value,
    pub torus: serde_json::Value,
    pub windows: Vec<(String, WindowImage)>,
    /// The serial the next window gets.
    #[serde(default)]
    pub next_window_serial: u32,
    pub transfers: serde_json::Value,
    pub mlink_flights: serde_json::Value,
    pub routers: serde_json::Value,
}

/// A handed-over fabric that cannot be taken back.
#[derive(Debug, thiserror::Error)]
pub enum FabricRestoreError {
    #[error("fabric state: {0}")]
    State(#[from] serde_json::Error),
    #[error("the image has {0} NIs, this daemon {1}")]
    Nodes(usize, usize),
    #[error("window of partition {0:?}: {1}")]
    Window(String, String),
}

impl FabricImage {
    /// Whether every part parses for this build (`crate::handover::validate`).
    pub fn check(&self) -> Result<(), serde_json::Error> {
        use serde_json::from_value as v;
        v::<Vec<Node>>(self.nodes.clone())?;
        v::<super::partition::Partitions>(self.partitions.clone())?;
        v::<HashMap<String, super::collective::PartitionColl>>(self.colls.clone())?;
        v::<super::topology::Torus>(self.torus.clone())?;
        v::<std::collections::VecDeque<super::transfer::Transfer>>(self.transfers.clone())?;
        v::<std::collections::VecDeque<super::mlink::Flight>>(self.mlink_flights.clone())?;
        v::<Vec<super::router::RouterRegs>>(self.routers.clone())?;
        Ok(())
    }
}

impl State {
    /// How the fabric was started: the torus's dimensions, the window kind, the collective
    /// timeout (`crate::handover::Startup`).
    pub fn startup(&self) -> (String, Option<ni_abi::window::Kind>, std::time::Duration) {
        (
            self.torus_initial.dims().to_string(),
            self.direct,
            self.collective_timeout,
        )
    }

    /// What a handover carries of the fabric; the windows' descriptors stay open here.
    pub fn image(&self) -> Result<FabricImage, serde_json::Error> {
        Ok(FabricImage {
            nodes: serde_json::to_value(&self.nodes)?,
            partitions: serde_json::to_value(&self.partitions)?,
            colls: serde_json::to_value(&self.colls)?,
            torus: serde_json::to_value(&self.torus)?,
            windows: self
                .windows
                .iter()
                .map(|(n, w)| (n.clone(), w.image()))
                .collect(),
            next_window_serial: super::window::next_serial(),
            transfers: serde_json::to_value(&self.transfers)?,
            mlink_flights: serde_json::to_value(&self.mlink_flights)?,
            routers: serde_json::to_value(&self.routers)?,
        })
    }

    /// Become the fabric `img` describes, over NIs already restored (their SRAM, DMA space
    /// and port are what the nodes point at). Run before the windows are synced.
    pub fn restore(
        &mut self,
        img: FabricImage,
        mut file: impl FnMut(std::os::fd::RawFd) -> std::io::Result<File>,
    ) -> Result<(), FabricRestoreError> {
        let mut nodes: Vec<Node> = serde_json::from_value(img.nodes)?;
        if nodes.len() != self.nodes.len() {
            return Err(FabricRestoreError::Nodes(nodes.len(), self.nodes.len()));
        }
        for (n, fresh) in nodes.iter_mut().zip(&self.nodes) {
            let ni = lock(&self.slots[n.index as usize].ni);
            n.dma = fresh.dma.clone();
            n.port = fresh.port.clone();
            n.sram = n.live.then(|| ni.sram.clone());
        }
        self.nodes = nodes;
        self.partitions = serde_json::from_value(img.partitions)?;
        self.colls = serde_json::from_value(img.colls)?;
        self.torus = serde_json::from_value(img.torus)?;
        self.routes.clear();
        self.transfers = serde_json::from_value(img.transfers)?;
        self.mlink_flights = serde_json::from_value(img.mlink_flights)?;
        self.routers = serde_json::from_value(img.routers)?;
        super::window::keep_serials_above(img.next_window_serial);
        let mut windows = HashMap::new();
        for (name, w) in img.windows {
            let files = w
                .fds
                .iter()
                .map(|&fd| file(fd))
                .collect::<std::io::Result<Vec<_>>>()
                .map_err(|e| FabricRestoreError::Window(name.clone(), e.to_string()))?;
            let win = Window::adopt(&w, files)
                .map_err(|e| FabricRestoreError::Window(name.clone(), e.to_string()))?;
            windows.insert(name, Arc::new(win));
        }
        self.windows = windows;
        // Everything is looked at once: a flag raised before the capture is not lost.
        for f in self
            .cm5_pending
            .iter()
            .chain(&self.lanai_pending)
            .chain(&self.t3e_pending)
            .chain(&self.mlink_pending)
        {
            f.store(true, Ordering::Release);
        }
        Ok(())
    }
}
