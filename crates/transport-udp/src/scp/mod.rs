//! SpiNNaker's SCP on sockets (feature `scp`): the windowed client for one board
//! ([`ScpClient`](crate::ScpClient)) and the client for a machine of many
//! ([`Machine`](crate::Machine)).

pub(crate) mod client;
pub(crate) mod machine;
