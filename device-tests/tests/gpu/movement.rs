//! Data movement and views on CUDA against both oracles.
use crate::harness::*;

#[test]
fn views_and_transpose() {
    let x = rand_f32(1, &[2, 3, 4]);
    Case::new("Reshape")
        .input(x.clone())
        .constant(i64s(&[2], vec![4, -1]))
        .check();
    Case::new("Flatten")
        .attr_i("axis", 2)
        .input(x.clone())
        .check();
    Case::new("Unsqueeze")
        .input(x.clone())
        .constant(i64s(&[2], vec![0, -1]))
        .check();
    Case::new("Squeeze")
        .input(rand_f32(2, &[3, 1, 5]))
        .constant(i64s(&[1], vec![1]))
        .check();
    Case::new("Identity").input(x.clone()).check();
    for perm in [[0, 1, 2], [2, 0, 1], [1, 2, 0], [2, 1, 0]] {
        Case::new("Transpose")
            .attr_ints("perm", &perm)
            .input(x.clone())
            .check();
    }
    Case::new("Transpose").input(rand_f32(3, &[33, 65])).check();
}

#[test]
fn slice_concat_split_expand_tile() {
    let x = rand_f32(4, &[5, 6, 7]);
    Case::new("Slice")
        .opset(13)
        .input(x.clone())
        .constant(i64s(&[3], vec![1, -1, 0]))
        .constant(i64s(&[3], vec![4, -100, 7]))
        .constant(i64s(&[3], vec![0, 1, 2]))
        .constant(i64s(&[3], vec![2, -2, 3]))
        .check();
    Case::new("Concat")
        .attr_i("axis", 1)
        .input(rand_f32(5, &[2, 3, 4]))
        .input(rand_f32(6, &[2, 1, 4]))
        .input(rand_f32(7, &[2, 5, 4]))
        .check();
    Case::new("Split")
        .opset(13)
        .attr_i("axis", 2)
        .input(x.clone())
        .constant(i64s(&[3], vec![2, 4, 1]))
        .outputs(3)
        .check();
    Case::new("Split")
        .opset(18)
        .attr_i("axis", 0)
        .attr_i("num_outputs", 2)
        .input(x.clone())
        .outputs(2)
        .check();
    Case::new("Expand")
        .input(rand_f32(8, &[3, 1]))
        .constant(i64s(&[3], vec![2, 3, 4]))
        .check();
    Case::new("Tile")
        .input(rand_f32(9, &[2, 3]))
        .constant(i64s(&[2], vec![3, 2]))
        .check();
}

#[test]
fn pad_gather_depth_space() {
    let x = rand_f32(10, &[2, 3, 4]);
    for mode in ["constant", "edge", "reflect", "wrap"] {
        Case::new("Pad")
            .opset(19)
            .attr_s("mode", mode)
            .input(x.clone())
            .constant(i64s(&[6], vec![0, 1, 2, 1, 2, 1]))
            .constant(quorum::Tensor::from_f32(&[], vec![1.5]).unwrap())
            .check();
    }
    Case::new("Gather")
        .attr_i("axis", 1)
        .input(x.clone())
        .constant(i64s(&[2, 2], vec![0, 2, -1, 1]))
        .check();
    Case::new("Gather")
        .attr_i("axis", 0)
        .input(x.clone())
        .constant(i64s(&[], vec![1]))
        .check();
    let y = rand_f32(11, &[1, 8, 2, 3]);
    Case::new("DepthToSpace")
        .attr_i("blocksize", 2)
        .input(y.clone())
        .check();
    Case::new("DepthToSpace")
        .attr_i("blocksize", 2)
        .attr_s("mode", "CRD")
        .input(y)
        .check();
    Case::new("SpaceToDepth")
        .attr_i("blocksize", 2)
        .input(rand_f32(12, &[1, 2, 4, 6]))
        .check();
}

/// ConstantOfShape as a device fill for 1-, 2- and 4-byte values (bool and int8 fill a partial last
/// word), judged by both oracles. 8-byte values stay on the CPU.
#[test]
fn constant_of_shape_every_fill_width() {
    use quorum::ir::Attr;
    use quorum::{DType, Tensor};
    let shapes: [&[i64]; 4] = [&[3, 5, 7], &[13], &[0, 4], &[1]];
    let values = [
        (DType::F32, -2.5),
        (DType::F16, 0.333),
        (DType::Bool, 1.0),
        (DType::I8, -7.0),
        (DType::U8, 200.0),
        (DType::I16, -300.0),
        (DType::I32, 123456.0),
        (DType::I64, 9.0),
    ];
    for (s, shape) in shapes.iter().enumerate() {
        for (want, v) in values {
            let value = Tensor::from_f64s(want, &[1], vec![v]).unwrap();
            let mut c = Case::new("ConstantOfShape")
                .attr("value", Attr::Tensor(value))
                .constant(i64s(&[shape.len()], shape.to_vec()));
            if want == DType::I64 {
                c = c.allow_fallback();
            }
            let out = c.check().outputs;
            assert_eq!(dtype(&out[0]), want, "shape {s}");
        }
    }
}

/// Inference-mode Dropout is the identity on the device (no kernel); its mask output is a fill of
/// true (opset 10 on) or of ones in the input's type (before). Judged by both oracles.
#[test]
fn dropout_is_the_identity_with_a_filled_mask() {
    use quorum::{DType, Tensor};
    let x = rand_f32(70, &[2, 3, 13]);
    Case::new("Dropout").opset(13).input(x.clone()).check();
    let out = Case::new("Dropout")
        .opset(13)
        .input(x.clone())
        .constant(Tensor::from_f32(&[], vec![0.3]).unwrap())
        .constant(Tensor::from_f64s(DType::Bool, &[], vec![0.0]).unwrap())
        .outputs(2)
        .check();
    assert_eq!(dtype(&out.outputs[1]), DType::Bool);
    let out = Case::new("Dropout")
        .opset(9)
        .input(x.clone())
        .outputs(2)
        .check();
    assert_eq!(dtype(&out.outputs[1]), DType::F32);
    let h = Tensor::from_f64s(
        DType::F16,
        &[5, 7],
        rand_f32(71, &[5, 7]).to_f64_vec().unwrap(),
    );
    Case::new("Dropout")
        .opset(7)
        .input(h.unwrap())
        .outputs(2)
        .check();
}
