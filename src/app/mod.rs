//! The studio. This part holds what the window is made of that needs no GUI toolkit: the
//! recipe editing behind every click and shortcut ([`edit`]) and the graph layout
//! ([`layout`]); the eframe window is built on them.

pub mod edit;
pub mod layout;
