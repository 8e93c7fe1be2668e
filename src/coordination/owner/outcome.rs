//! Which failures leave the backend untouched, and which may have run anyway.

use crate::error::{Error, ErrorKind};

/// Whether a failed step certainly changed nothing on the backend: refused before it was
/// sent (arguments, slots, a refused connection, a connection that could not be made in
/// time), refused by the server before it ran (a failover reply, credentials, an ACL, OOM),
/// answered by a step that validates before it writes (corrupt state, a full memory
/// backend), or an acquisition that arrived after its deadline.
///
/// Anything else may have run: a timeout or a connection lost after sending, a server error
/// reply (a script can fail after a write), or a reply of an unexpected shape.
pub(crate) fn had_no_effect(err: &Error) -> bool {
    !err.is_outcome_uncertain()
        && matches!(
            err.kind(),
            ErrorKind::Io
                | ErrorKind::Timeout
                | ErrorKind::Transient
                | ErrorKind::Authentication
                | ErrorKind::Permission
                | ErrorKind::OutOfMemory
                | ErrorKind::InvalidArgument
                | ErrorKind::CrossSlot
                | ErrorKind::CorruptState
                | ErrorKind::CapacityExceeded
                | ErrorKind::Closed
                | ErrorKind::Unsupported
        )
}

/// The error for an acquisition that reached the server after its deadline: certainly
/// without effect, and *unavailable* (the backend did not answer in time for it to count).
pub(crate) fn arrived_late() -> Error {
    Error::new(
        ErrorKind::Timeout,
        "the acquisition reached the server after its deadline; nothing was taken",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_certain_refusals_had_no_effect() {
        assert!(had_no_effect(&Error::new(ErrorKind::Io, "refused")));
        assert!(had_no_effect(&Error::invalid_argument("lease")));
        assert!(!had_no_effect(
            &Error::new(ErrorKind::Io, "dropped").uncertain(true)
        ));
        assert!(!had_no_effect(
            &Error::new(ErrorKind::Timeout, "slow").uncertain(true)
        ));
        // No connection within the bound, or an acquisition that arrived too late.
        assert!(had_no_effect(&Error::new(ErrorKind::Timeout, "connecting")));
        assert!(had_no_effect(&arrived_late()));
        assert!(!had_no_effect(&Error::new(ErrorKind::Server, "OOM")));
        assert!(!had_no_effect(&Error::unexpected_reply("odd")));
    }
}
