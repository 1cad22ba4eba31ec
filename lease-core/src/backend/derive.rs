//! Capability flags derived from the store traits a type implements.
//!
//! [`derived_capabilities!`](crate::derived_capabilities) sets
//! [`partitions`](crate::Capabilities::partitions), [`membership`](crate::Capabilities::membership)
//! and [`slots`](crate::Capabilities::slots) from whether the store type implements
//! [`PartitionStore`], [`MembershipStore`] and [`SlotStore`], so a store cannot declare an
//! operation it does not have, or hide one it has. It works on a concrete store type (or a
//! generic one whose bounds decide the traits), inside the store's own `capabilities()`.

use std::marker::PhantomData;

use crate::store::membership::MembershipStore;
use crate::store::partitions::PartitionStore;
use crate::store::slots::SlotStore;

/// A type-level question: which store traits does `T` implement? Used by
/// [`derived_capabilities!`](crate::derived_capabilities) only.
#[doc(hidden)]
pub struct Probe<T: ?Sized>(PhantomData<T>);

impl<T: ?Sized> Probe<T> {
    #[doc(hidden)]
    pub fn new() -> Probe<T> {
        Probe(PhantomData)
    }
}

macro_rules! probe {
    ($yes:ident, $no:ident, $method:ident, $trait:ident) => {
        #[doc(hidden)]
        pub trait $yes {
            fn $method(&self) -> bool {
                true
            }
        }
        impl<T: $trait + ?Sized> $yes for &Probe<T> {}
        #[doc(hidden)]
        pub trait $no {
            fn $method(&self) -> bool {
                false
            }
        }
        impl<T: ?Sized> $no for Probe<T> {}
    };
}

probe!(HasPartitions, NoPartitions, partitions, PartitionStore);
probe!(HasMembership, NoMembership, membership, MembershipStore);
probe!(HasSlots, NoSlots, slots, SlotStore);

/// [`Capabilities`](crate::Capabilities) with `partitions`, `membership` and `slots` derived
/// from the store traits `$store` implements, and everything else at its default: write the
/// rest of a store's capabilities with `..derived_capabilities!(Self)` and never set those three
/// by hand.
///
/// ```
/// use lease_core::{Capabilities, derived_capabilities};
/// use lease_local::MemoryStore;
///
/// let caps: Capabilities = derived_capabilities!(MemoryStore);
/// assert!(caps.partitions && caps.membership && caps.slots);
/// let store = lease_core::LeaseStore::capabilities(&MemoryStore::new());
/// assert_eq!((caps.partitions, caps.membership, caps.slots), (store.partitions, store.membership, store.slots));
/// ```
#[macro_export]
macro_rules! derived_capabilities {
    ($store:ty) => {{
        #[allow(unused_imports)]
        use $crate::backend::derive::{
            HasMembership as _, HasPartitions as _, HasSlots as _, NoMembership as _,
            NoPartitions as _, NoSlots as _,
        };
        let probe = $crate::backend::derive::Probe::<$store>::new();
        $crate::Capabilities {
            partitions: (&&probe).partitions(),
            membership: (&&probe).membership(),
            slots: (&&probe).slots(),
            ..$crate::Capabilities::default()
        }
    }};
}
