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
