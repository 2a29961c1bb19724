//! The PCI function: configuration space and the MSI-X table.

pub mod config;
pub mod msix;
