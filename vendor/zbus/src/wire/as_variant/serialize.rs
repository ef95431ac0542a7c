use serde::ser::{SerializeStruct, Serializer};

use crate::wire::{Signature, Type};

/// A wrapper to serialize `T: Type + serde::Serialize` as a value.
///
/// When the type of a value is well-known, you may avoid the cost and complexity of wrapping to a
/// generic [`enum@crate::Variant`] and instead use this wrapper.
///
/// ```
/// # use zbus::{as_variant::Serialize, wire::{LE, serialized::Context, to_bytes}};
/// #
/// # let ctxt = Context::new(LE, 0);
/// let _ = to_bytes(ctxt, &Serialize(&[0, 1, 2])).unwrap();
/// ```
pub struct Serialize<'a, T: Type + serde::Serialize>(pub &'a T);

impl<T: Type + serde::Serialize> serde::Serialize for Serialize<'_, T> {
    fn serialize<S>(&self, serializer: S) -> Result<S::Ok, S::Error>
    where
        S: Serializer,
    {
        // `Variant`/`OwnedVariant` (and any other type whose signature is already `v`) serialize
        // themselves as a variant, so wrapping them here would emit a variant-of-variant. Just
        // delegate to their own `Serialize` impl in that case.
        if T::SIGNATURE == &Signature::Variant {
            return self.0.serialize(serializer);
        }

        // Serializer implementation needs to ensure padding isn't added for Variant.
        let mut structure = serializer.serialize_struct("Variant", 2)?;

        structure.serialize_field("signature", T::SIGNATURE)?;
        structure.serialize_field("value", self.0)?;

        structure.end()
    }
}

impl<T: Type + serde::Serialize> Type for Serialize<'_, T> {
    const SIGNATURE: &'static crate::Signature = &crate::Signature::Variant;
}

/// Serialize a value as a [`enum@zbus::Variant`].
pub fn serialize<T, S>(value: &T, ser: S) -> std::result::Result<S::Ok, S::Error>
where
    S: Serializer,
    T: Type + serde::Serialize,
{
    use serde::Serialize as _;

    Serialize(value).serialize(ser)
}

/// Serialize an optional value as a [`enum@zbus::Variant`].
pub fn serialize_optional<T, S>(value: &Option<T>, ser: S) -> std::result::Result<S::Ok, S::Error>
where
    S: Serializer,
    T: Type + serde::Serialize,
{
    super::serialize(value.as_ref().unwrap(), ser)
}
