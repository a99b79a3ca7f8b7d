//! The facts about each kind of MDT request, in one table: the `mdt_requests!` invocation
//! in `request.rs` declares every request with its fields and, on the same row, its
//! opcode, statistics name, class, flags, deadline and credentials. Everything the
//! servers and clients decide by the kind of request (numbering and resending, the
//! commit thread or not, client classes, root squash, statistics, deadlines, the MDT's
//! fast opens and closes) is read from [`RequestFacts`]; the few facts that depend on a
//! field's value are refined in `request.rs` beside the table, and nowhere else.

/// What a request does to an MDT, decided here once for the MDT (which runs reads
/// concurrently and changes through its commit thread) and for clients (which number
/// changes so that a resend is answered from the recorded reply, and resend the rest
/// freely).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestClass {
    /// Reads state and changes nothing: served concurrently with everything else;
    /// sending it twice is harmless.
    Read,
    /// A file-lock request, served by the MDT's in-memory lock table; never numbered.
    Lock,
    /// Makes earlier changes durable and changes nothing itself: ordered with the
    /// changes; sending it twice is harmless.
    Sync,
    /// Served by the MDT's HSM coordinator outside the commit thread: waits for data to
    /// arrive from an archive. Its only change (a restored file is no longer released)
    /// is made by the MDT itself; sending it twice is harmless.
    Hsm,
    /// Changes state (or must be ordered with changes): run by the commit thread;
    /// clients number it, and a resend is answered from the reply recorded for it.
    Change,
}

/// How long a client waits for the answer to a request before it gives up on the
/// connection and resends (or fails).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Deadline {
    /// The connection's request timeout.
    Default,
    /// No deadline: the MDT answers when a long piece of work is done (a directory
    /// migration copies the whole directory; a restore waits for the store, which
    /// retries failures a bounded number of times itself).
    Unbounded,
    /// The request timeout plus the wait the request asks the MDT for (`wait_ms`).
    PlusWait,
}

/// The facts about one kind of MDT request (one row of the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestFacts {
    /// The request kind the row describes.
    pub op: super::MdtOp,
    /// The opcode in the frame header. On the wire: never change or reuse one
    /// (`every_request_kind_is_pinned`); a new request takes the next free opcode.
    pub opcode: u16,
    /// The short, stable name in statistics and logs.
    pub name: &'static str,
    /// What the request does to the MDT.
    pub class: RequestClass,
    /// A [`RequestClass::Change`] that gives the same result when done twice (it leaves
    /// what it did alone), so a client may resend it unnumbered.
    pub resendable: bool,
    /// An administrator's request (`set_param -P`, pools, migration): refused from a
    /// client class without the admin flag.
    pub admin_only: bool,
    /// A step that only servers send (cross-MDT operations, tiering wants): refused from
    /// a connection not authenticated as a server.
    pub server_only: bool,
    /// The MDT may serve it on the request path instead of the commit thread when it
    /// changes nothing stored (an open without truncation, a close that records nothing;
    /// see `weft_mdt::fast`).
    pub fast: bool,
    /// How long a client waits for the answer.
    pub deadline: Deadline,
    /// It carries the caller's credentials, which a root-squashing client class maps to
    /// `nobody`.
    pub squashes: bool,
}

impl RequestFacts {
    /// The flags a row does not name.
    pub(super) const BASE: RequestFacts = RequestFacts {
        op: super::MdtOp::GetAttr,
        opcode: 0,
        name: "",
        class: RequestClass::Read,
        resendable: false,
        admin_only: false,
        server_only: false,
        fast: false,
        deadline: Deadline::Default,
        squashes: false,
    };
}

/// Declares [`super::MdtRequest`], its field-less twin [`super::MdtOp`] and the facts of
/// each request kind from one table. A row is a variant with its doc comment and fields,
/// then `=> OPCODE "name" Class`, optional flags in brackets (fields of
/// [`RequestFacts`] set to true), an optional `deadline(Kind)` and an optional
/// `squash(field)` naming the credentials root squash maps.
macro_rules! mdt_requests {
    ($(
        $(#[$meta:meta])*
        $variant:ident $({ $($field:ident : $ty:ty),* $(,)? })?
            => $opcode:literal $name:literal $class:ident
            $([$($flag:ident),* $(,)?])?
            $(deadline($deadline:ident))?
            $(squash($cred:ident))?;
    )*) => {
        /// A request to a metadata target.
        // Variant fields are described in their variant's doc comment.
        #[allow(missing_docs)]
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        pub enum MdtRequest {
            $(
                $(#[$meta])*
                $variant $({ $($field: $ty),* })?,
            )*
        }

        /// The kind of an [`MdtRequest`]: its variant without the fields.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum MdtOp {
            $(
                #[doc = concat!("[`MdtRequest::", stringify!($variant), "`].")]
                $variant,
            )*
        }

        impl MdtOp {
            /// Every request kind, in the table's order.
            pub const ALL: &'static [MdtOp] = &[$(MdtOp::$variant),*];

            /// This kind's row of the table.
            pub fn facts(self) -> &'static RequestFacts {
                match self {
                    $(
                        MdtOp::$variant => {
                            const FACTS: RequestFacts = RequestFacts {
                                op: MdtOp::$variant,
                                opcode: $opcode,
                                name: $name,
                                class: RequestClass::$class,
                                $($($flag: true,)*)?
                                $(deadline: Deadline::$deadline,)?
                                $(squashes: { let _ = stringify!($cred); true },)?
                                ..RequestFacts::BASE
                            };
                            &FACTS
                        }
                    )*
                }
            }
        }

        impl MdtRequest {
            /// The request's kind.
            pub fn op(&self) -> MdtOp {
                match self {
                    $(MdtRequest::$variant { .. } => MdtOp::$variant,)*
                }
            }

            /// Maps user and group 0 of the request's credentials to `nobody`.
            fn squash_credentials(&mut self, nobody: u32) {
                match self {
                    $(
                        MdtRequest::$variant { $($cred: creds,)? .. } => {
                            $(let _ = stringify!($cred); creds.squash_root(nobody);)?
                        }
                    )*
                }
            }
        }
    };
}
pub(super) use mdt_requests;
