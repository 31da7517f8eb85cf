//! The data-plane contract (docs/contract.md) in Rust: the
//! `DistributedSession` trait exactly as the contract declares it, its
//! completions (`Completion`, `BoundedCompletion`, `Submission`) and the
//! supporting types (dtypes, value descriptors, groups, scopes, session
//! descriptor, capabilities). The C++ statement of the same contract is
//! `dataplane/`'s type headers (`dtype.h`, `value_descriptor.h`,
//! `collective_group.h`, `session_descriptor.h`, `collective_scope.h`,
//! `capabilities.h`, `peer_transfer.h`), `completion.h` and `session.h`; the types here
//! mirror those (same validation, same names in snake case).
//!
//! Nothing here touches the C ABI: `crate::Session` implements the traits
//! for Gloo host memory, and another backend could implement them too.

use std::collections::BTreeSet;
use std::error::Error;
use std::fmt;
use std::time::Duration;

/// Element types a value may hold (docs/contract.md, "Types").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorDtype {
    Bool,
    F32,
    F16,
    Bf16,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Complex64,
}

impl TensorDtype {
    /// Every dtype, in the C ABI's `rankd_dtype` order.
    pub const ALL: [TensorDtype; 14] = [
        TensorDtype::Bool,
        TensorDtype::F32,
        TensorDtype::F16,
        TensorDtype::Bf16,
        TensorDtype::F64,
        TensorDtype::I8,
        TensorDtype::I16,
        TensorDtype::I32,
        TensorDtype::I64,
        TensorDtype::U8,
        TensorDtype::U16,
        TensorDtype::U32,
        TensorDtype::U64,
        TensorDtype::Complex64,
    ];

    /// Bytes per element (bool is one byte).
    pub fn size(self) -> usize {
        match self {
            TensorDtype::Bool | TensorDtype::I8 | TensorDtype::U8 => 1,
            TensorDtype::F16 | TensorDtype::Bf16 | TensorDtype::I16 | TensorDtype::U16 => 2,
            TensorDtype::F32 | TensorDtype::I32 | TensorDtype::U32 => 4,
            TensorDtype::F64 | TensorDtype::I64 | TensorDtype::U64 | TensorDtype::Complex64 => 8,
        }
    }

    /// "f32", "bf16", "complex64", ... (the C++ `DtypeName`).
    pub fn name(self) -> &'static str {
        match self {
            TensorDtype::Bool => "bool",
            TensorDtype::F32 => "f32",
            TensorDtype::F16 => "f16",
            TensorDtype::Bf16 => "bf16",
            TensorDtype::F64 => "f64",
            TensorDtype::I8 => "i8",
            TensorDtype::I16 => "i16",
            TensorDtype::I32 => "i32",
            TensorDtype::I64 => "i64",
            TensorDtype::U8 => "u8",
            TensorDtype::U16 => "u16",
            TensorDtype::U32 => "u32",
            TensorDtype::U64 => "u64",
            TensorDtype::Complex64 => "complex64",
        }
    }
}

impl fmt::Display for TensorDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A descriptor or group that breaks the contract's rules, refused when it
/// is made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescriptorError {
    message: String,
}

impl DescriptorError {
    fn new(message: String) -> Self {
        DescriptorError { message }
    }
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for DescriptorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "INVALID_ARGUMENT: {}", self.message)
    }
}

impl Error for DescriptorError {}

/// Row-major logical shape and element type of a value. The empty shape is
/// a scalar (one element). The leading extent may be 0: a value with no
/// rows (a rank with no requests) is valid for every operation and pairs
/// like any other; any other zero extent is refused (docs/contract.md,
/// "Empty values").
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ValueDescriptor {
    shape: Vec<usize>,
    dtype: TensorDtype,
}

impl ValueDescriptor {
    /// `shape[0]` may be 0. Refuses a zero extent after the first (naming
    /// the dimension) or an element count that overflows.
    pub fn new(shape: Vec<usize>, dtype: TensorDtype) -> Result<Self, DescriptorError> {
        if let Some(i) = shape.iter().skip(1).position(|&d| d == 0) {
            return Err(DescriptorError::new(format!(
                "dimension {} of {}{:?} is zero; only the leading extent may be 0",
                i + 1,
                dtype,
                shape
            )));
        }
        Self::checked(shape, dtype)
    }

    /// A scalar of `dtype`.
    pub fn scalar(dtype: TensorDtype) -> Self {
        ValueDescriptor {
            shape: Vec::new(),
            dtype,
        }
    }

    /// `rows` rows shaped like `row`: shape `[rows, row.shape...]`; `rows`
    /// may be 0.
    pub fn rows_of(rows: usize, row: &ValueDescriptor) -> Result<Self, DescriptorError> {
        let mut shape = Vec::with_capacity(row.shape.len() + 1);
        shape.push(rows);
        shape.extend_from_slice(&row.shape);
        Self::checked(shape, row.dtype)
    }

    fn checked(shape: Vec<usize>, dtype: TensorDtype) -> Result<Self, DescriptorError> {
        let bytes = shape
            .iter()
            .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d));
        if bytes.is_none() {
            return Err(DescriptorError::new(format!(
                "{}{:?} overflows the address space",
                dtype, shape
            )));
        }
        Ok(ValueDescriptor { shape, dtype })
    }

    /// The descriptor of one row of the leading axis: `shape[1..]` (a scalar
    /// row for a 1-D value or a scalar).
    pub fn row_descriptor(&self) -> ValueDescriptor {
        ValueDescriptor {
            shape: self.shape.iter().skip(1).copied().collect(),
            dtype: self.dtype,
        }
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn dtype(&self) -> TensorDtype {
        self.dtype
    }
    pub fn element_count(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn byte_size(&self) -> usize {
        self.element_count() * self.dtype.size()
    }
    /// Length of the leading axis (1 for a scalar).
    pub fn rows(&self) -> usize {
        self.shape.first().copied().unwrap_or(1)
    }
}

/// "f32[4, 8]", "i32[]" for a scalar.
impl fmt::Display for ValueDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}", d)?;
        }
        f.write_str("]")
    }
}

pub type CollectiveGroupId = u32;

/// The id of the group holding every rank (the world scope's group).
pub const WORLD_GROUP_ID: CollectiveGroupId = 1;

/// One collective group as one rank sees it: the ordered, non-empty,
/// duplicate-free member list of world ranks, and this rank's index in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollectiveGroupDescriptor {
    id: CollectiveGroupId,
    members: Vec<u32>,
    local_rank: u32,
}

impl CollectiveGroupDescriptor {
    /// Refuses an empty or duplicated member list, or one where
    /// `members[local_rank]` is not `rank`.
    pub fn new(
        id: CollectiveGroupId,
        members: Vec<u32>,
        local_rank: u32,
        rank: u32,
    ) -> Result<Self, DescriptorError> {
        if members.is_empty() {
            return Err(DescriptorError::new(format!("group {} has no members", id)));
        }
        let mut sorted = members.clone();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return Err(DescriptorError::new(format!(
                "group {} lists a member twice: {:?}",
                id, members
            )));
        }
        if members.get(local_rank as usize) != Some(&rank) {
            return Err(DescriptorError::new(format!(
                "group {}: members[{}] is not rank {} ({:?})",
                id, local_rank, rank, members
            )));
        }
        Ok(CollectiveGroupDescriptor {
            id,
            members,
            local_rank,
        })
    }

    pub fn id(&self) -> CollectiveGroupId {
        self.id
    }
    pub fn members(&self) -> &[u32] {
        &self.members
    }
    pub fn local_rank(&self) -> u32 {
        self.local_rank
    }
    pub fn size(&self) -> u32 {
        self.members.len() as u32
    }
}

/// Stable topology and rank identity of a session; it does not change
/// during the session. rankd adds where the rank runs on its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DistributedSessionDescriptor {
    world_size: u32,
    rank: u32,
    local_rank: u32,
    ranks_on_node: u32,
    groups: Vec<CollectiveGroupDescriptor>,
}

impl DistributedSessionDescriptor {
    /// Refuses unless `world_size > 0`, `rank < world_size`, group ids are
    /// unique and every member is below `world_size`. Until
    /// [`set_node_placement`](Self::set_node_placement) the whole world is
    /// on one node.
    pub fn new(
        world_size: u32,
        rank: u32,
        groups: Vec<CollectiveGroupDescriptor>,
    ) -> Result<Self, DescriptorError> {
        if world_size == 0 || rank >= world_size {
            return Err(DescriptorError::new(format!(
                "rank {} of a world of {}",
                rank, world_size
            )));
        }
        let mut ids = BTreeSet::new();
        for g in &groups {
            if !ids.insert(g.id) {
                return Err(DescriptorError::new(format!(
                    "group id {} appears twice",
                    g.id
                )));
            }
            if let Some(m) = g.members.iter().find(|&&m| m >= world_size) {
                return Err(DescriptorError::new(format!(
                    "group {} has member {}, outside a world of {}",
                    g.id, m, world_size
                )));
            }
        }
        Ok(DistributedSessionDescriptor {
            world_size,
            rank,
            local_rank: rank,
            ranks_on_node: world_size,
            groups,
        })
    }

    pub fn world_size(&self) -> u32 {
        self.world_size
    }
    pub fn rank(&self) -> u32 {
        self.rank
    }
    pub fn groups(&self) -> &[CollectiveGroupDescriptor] {
        &self.groups
    }
    /// The group with `id`, if this rank is a member.
    pub fn group(&self, id: CollectiveGroupId) -> Option<&CollectiveGroupDescriptor> {
        self.groups.iter().find(|g| g.id == id)
    }
    /// The members of `scope`, if this rank is in it.
    pub fn scope_group(&self, scope: CollectiveScope) -> Option<&CollectiveGroupDescriptor> {
        self.group(scope.group_id())
    }
    /// This rank's index among its node's ranks.
    pub fn local_rank(&self) -> u32 {
        self.local_rank
    }
    /// How many ranks its node runs.
    pub fn ranks_on_node(&self) -> u32 {
        self.ranks_on_node
    }
    /// Refuses (and changes nothing) unless
    /// `local_rank < ranks_on_node <= world_size`.
    pub fn set_node_placement(
        &mut self,
        local_rank: u32,
        ranks_on_node: u32,
    ) -> Result<(), DescriptorError> {
        if local_rank >= ranks_on_node || ranks_on_node > self.world_size {
            return Err(DescriptorError::new(format!(
                "local rank {} of {} ranks on a node of a world of {}",
                local_rank, ranks_on_node, self.world_size
            )));
        }
        self.local_rank = local_rank;
        self.ranks_on_node = ranks_on_node;
        Ok(())
    }
}

/// Where a collective runs: every rank of the world, or one group by id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CollectiveScope {
    World,
    Group(CollectiveGroupId),
}

impl CollectiveScope {
    /// The group id the scope runs on ([`WORLD_GROUP_ID`] for the world).
    pub fn group_id(self) -> CollectiveGroupId {
        match self {
            CollectiveScope::World => WORLD_GROUP_ID,
            CollectiveScope::Group(id) => id,
        }
    }
}

impl fmt::Display for CollectiveScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CollectiveScope::World => f.write_str("world"),
            CollectiveScope::Group(id) => write!(f, "group {}", id),
        }
    }
}

/// What a backend can do; everything false or empty by default. Fail
/// closed: an operation whose capability is not advertised is refused
/// (Unimplemented or FailedPrecondition, naming backend and capability)
/// before any native work.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DistributedCapabilities {
    pub world_collectives: bool,
    pub collective_groups: BTreeSet<CollectiveGroupId>,
    pub point_to_point: bool,
    pub variable_all_to_all: bool,
    pub exact_completion: bool,
}

/// An output and the completion after which it is authoritative.
#[derive(Debug)]
pub struct Submission<T, C> {
    pub output: T,
    pub completion: C,
}

impl<T, C: Completion> Submission<T, C> {
    /// Waits for the completion and returns the output, now authoritative.
    pub fn wait(self) -> Result<T, C::Error> {
        self.completion.wait()?;
        Ok(self.output)
    }
}

/// Exact completion of submitted work. `is_complete` never blocks and is
/// never early (a failed operation is complete too); `wait` blocks on this
/// completion only and returns the operation's result. A completion keeps
/// every tensor, buffer, stream, group and route its work uses until that
/// work has finished.
pub trait Completion {
    type Error: Error + Send + Sync + 'static;

    fn is_complete(&self) -> bool;
    fn wait(&self) -> Result<(), Self::Error>;
}

/// What happens to work that misses a bounded wait's deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CancellationMode {
    /// Native cancellation and teardown have finished when the wait
    /// returns (NCCL: `ncclCommAbort`); the communicator is unusable.
    NativeCancel,
    /// The work keeps running, owned by a quarantine that frees its
    /// resources only after exact completion; the communicator refuses new
    /// work meanwhile.
    QuarantineUntilComplete,
}

impl CancellationMode {
    pub fn name(self) -> &'static str {
        match self {
            CancellationMode::NativeCancel => "NativeCancel",
            CancellationMode::QuarantineUntilComplete => "QuarantineUntilComplete",
        }
    }
}

/// The outcome of a bounded wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitOutcome {
    Completed,
    /// The deadline passed and the mode was applied (the session is then
    /// poisoned).
    DeadlineExceeded(CancellationMode),
}

/// A completion whose wait can be bounded.
pub trait BoundedCompletion {
    type Error: Error + Send + Sync + 'static;

    /// Whether `wait_bounded` accepts `mode`: lets a scheduler refuse a
    /// policy before it submits anything.
    fn supports_cancellation(&self, mode: CancellationMode) -> bool;

    /// Waits at most `timeout`: `Completed` when the work finished OK, the
    /// work's error when it failed, `DeadlineExceeded(mode)` once `mode` was
    /// applied after the deadline. A zero timeout (InvalidArgument) and an
    /// unsupported mode (FailedPrecondition) are errors before waiting.
    fn wait_bounded(
        &self,
        timeout: Duration,
        mode: CancellationMode,
    ) -> Result<WaitOutcome, Self::Error>;
}

/// Optional high-level transfer and collective capability of a selected
/// session.
///
/// This contract deliberately operates on an opaque backend value. It
/// models the few communication submissions needed by model execution
/// without making core define a tensor algebra or exposing native groups,
/// streams, or events. Every operation is scoped to the session selected
/// for the complete model.
///
/// This trait is dyn compatible.
pub trait DistributedSession {
    /// Backend-owned tensor or buffer value.
    type Value;
    /// Exact completion retaining the submitted communication resources.
    type Completion: Completion<Error = Self::Error>;
    /// Structured backend error.
    type Error: Error + Send + Sync + 'static;

    /// Stable topology and rank identity.
    fn descriptor(&self) -> DistributedSessionDescriptor;
    /// Fail-closed communication support.
    fn capabilities(&self) -> DistributedCapabilities;
    /// Submits a sum reduction over scope.
    fn all_reduce_sum(
        &self,
        scope: CollectiveScope,
        input: &Self::Value,
    ) -> Result<Submission<Self::Value, Self::Completion>, Self::Error>;
    /// Submits a leading-rank-axis gather over scope.
    fn all_gather(
        &self,
        scope: CollectiveScope,
        input: &Self::Value,
    ) -> Result<Submission<Self::Value, Self::Completion>, Self::Error>;
    /// Submits a variable-count all-to-all exchange over scope.
    fn all_to_all_v(
        &self,
        scope: CollectiveScope,
        input: &Self::Value,
        send_counts: &[usize],
        receive_counts: &[usize],
    ) -> Result<Submission<Self::Value, Self::Completion>, Self::Error>;
    /// Submits a point-to-point send to a rank within scope.
    fn send(
        &self,
        scope: CollectiveScope,
        peer: usize,
        input: &Self::Value,
    ) -> Result<Submission<Self::Value, Self::Completion>, Self::Error>;
    /// Submits a point-to-point receive from a rank within scope.
    fn receive(
        &self,
        scope: CollectiveScope,
        peer: usize,
        value: &ValueDescriptor,
    ) -> Result<Submission<Self::Value, Self::Completion>, Self::Error>;
    /// Synchronously gathers portable scheduler metadata across the world.
    fn all_gather_words(&self, local: &[u32]) -> Result<Vec<u32>, Self::Error>;
}

/// One transfer of a batched send/receive (a rankd addition): `value` goes
/// to, or for a receive is the caller-owned output filled from, member
/// `peer` of the scope.
#[derive(Clone, Debug)]
pub struct PeerValue<T> {
    pub peer: usize,
    pub value: T,
}
