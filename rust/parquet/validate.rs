//! A cheap consistency check of decoded Arrow arrays.
//!
//! arrow-rs builds its string, binary, list and dictionary arrays with
//! `build_unchecked` in release builds: its decoders keep them consistent for valid
//! files, but a corrupt page can leave offsets pointing past the values or dictionary
//! keys past the dictionary, and pyarrow (which trusts arrays handed over the C data
//! interface) then reads out of bounds. This checks what makes an array safe to read —
//! buffer sizes, offsets within their values and non-decreasing, keys within their
//! dictionary — and skips UTF-8 validation, which arrow-rs does while decoding and
//! which would cost more than the rest together.

use arrow_array::{Array, RecordBatch};
use arrow_data::ArrayData;
use arrow_schema::{ArrowError, DataType};

pub fn validate_batch(batch: &RecordBatch) -> Result<(), String> {
    for (i, col) in batch.columns().iter().enumerate() {
        validate(&col.to_data()).map_err(|e| format!("column {:?}: {e}", batch.schema().field(i).name()))?;
    }
    Ok(())
}

fn monotone<T: arrow_buffer::ArrowNativeType + PartialOrd>(d: &ArrayData) -> Result<(), ArrowError> {
    let offsets = d.buffer::<T>(0);
    let offsets = offsets.get(..d.len() + 1).unwrap_or(offsets);
    if offsets.windows(2).all(|w| w[0] <= w[1]) {
        Ok(())
    } else {
        Err(ArrowError::InvalidArgumentError(format!("{} offsets decrease", d.data_type())))
    }
}

fn validate(d: &ArrayData) -> Result<(), ArrowError> {
    // buffer sizes, null counts, first and last offsets within the values: O(1) per array
    d.validate()?;
    match d.data_type() {
        DataType::Utf8 if !d.is_empty() => monotone::<i32>(d)?,
        DataType::LargeUtf8 if !d.is_empty() => monotone::<i64>(d)?,
        // every offset, every dictionary key: one pass over them
        DataType::Binary
        | DataType::LargeBinary
        | DataType::List(_)
        | DataType::LargeList(_)
        | DataType::Map(..)
        | DataType::Dictionary(..) => d.validate_values()?,
        _ => {}
    }
    d.child_data().iter().try_for_each(validate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, Int32Array, ListArray, StringArray};
    use arrow_buffer::Buffer;
    use std::sync::Arc;

    fn batch(col: ArrayRef) -> RecordBatch {
        RecordBatch::try_from_iter([("c", col)]).expect("batch")
    }

    #[test]
    fn valid_arrays_pass() {
        let list = ListArray::from_iter_primitive::<arrow_array::types::Int32Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            None,
            Some(vec![]),
        ]);
        assert!(validate_batch(&batch(Arc::new(list))).is_ok());
        assert!(validate_batch(&batch(Arc::new(StringArray::from(vec!["a", "", "bc"])))).is_ok());
    }

    #[test]
    fn list_offsets_past_the_values_are_caught() {
        let values = Int32Array::from(vec![1, 2, 3]).into_data();
        let field = Arc::new(arrow_schema::Field::new_list_field(DataType::Int32, true));
        let data = ArrayData::builder(DataType::List(field))
            .len(2)
            .add_buffer(Buffer::from_slice_ref([0i32, 2, 5]))
            .add_child_data(values);
        // SAFETY: deliberately inconsistent (what a corrupt page could produce), never read
        let data = unsafe { data.build_unchecked() };
        let e = validate_batch(&batch(Arc::new(ListArray::from(data)))).unwrap_err();
        assert!(e.contains("column \"c\""), "{e}");
    }

    #[test]
    fn decreasing_string_offsets_are_caught() {
        let data = ArrayData::builder(DataType::Utf8)
            .len(2)
            .add_buffer(Buffer::from_slice_ref([0i32, 3, 1]))
            .add_buffer(Buffer::from_slice_ref(b"abc"));
        // SAFETY: as above
        let data = unsafe { data.build_unchecked() };
        assert!(validate_batch(&batch(Arc::new(StringArray::from(data)))).is_err());
    }
}
