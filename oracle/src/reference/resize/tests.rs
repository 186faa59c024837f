//! Resize tests: hand-worked nearest, linear and cubic cases, the specification's and ONNX's expected
//! values, Resize-10 against its own test data, tf_half_pixel_for_nn, antialias, axes and
//! keep_aspect_ratio_policy.
use super::super::Reference;
use super::super::testutil::*;
use crate::{Attr, DType, Oracle, Value};

fn v(shape: Vec<usize>, data: Vec<f64>) -> Option<Value> {
    Some(Value::new(DType::F32, shape, data).unwrap())
}

#[test]
fn resize_nearest_and_linear_by_hand() {
    let x = v(vec![1, 2], vec![1.0, 3.0]);
    let sc = v(vec![2], vec![1.0, 2.0]);
    // asymmetric nearest (floor): x_orig = i / 2 -> [0, 0, 1, 1]
    let n = node(
        "Resize",
        13,
        &[
            (
                "coordinate_transformation_mode",
                Attr::String("asymmetric".into()),
            ),
            ("nearest_mode", Attr::String("floor".into())),
        ],
    );
    let out = Reference
        .evaluate(&n, &[x.clone(), None, sc.clone()])
        .unwrap();
    assert_eq!(out[0].value.data, vec![1.0, 1.0, 3.0, 3.0]);
    // half_pixel linear: x_orig = (i + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25 -> clamp edges
    let n = node("Resize", 13, &[("mode", Attr::String("linear".into()))]);
    let out = Reference.evaluate(&n, &[x.clone(), None, sc]).unwrap();
    assert_all_close(&out[0].value.data, &[1.0, 1.5, 2.5, 3.0]);
    // align_corners linear via sizes: 3 outputs -> x_orig 0, 0.5, 1
    let n = node(
        "Resize",
        13,
        &[
            ("mode", Attr::String("linear".into())),
            (
                "coordinate_transformation_mode",
                Attr::String("align_corners".into()),
            ),
        ],
    );
    let sizes = Some(Value::new(DType::I64, vec![2], vec![1.0, 3.0]).unwrap());
    let out = Reference.evaluate(&n, &[x, None, None, sizes]).unwrap();
    assert_all_close(&out[0].value.data, &[1.0, 2.0, 3.0]);
}

#[test]
fn resize_cubic_and_crop_against_spec_values() {
    // Expected values from the ONNX specification's reference evaluator (f32 outputs, so 1e-6).
    let near = |g: &[f64], w: &[f64]| {
        for (a, b) in g.iter().zip(w) {
            assert!((a - b).abs() < 1e-6 * (1.0 + b.abs()), "got {a}, want {b}");
        }
    };
    let x = v(vec![1, 4], vec![1.0, 2.0, 4.0, 8.0]);
    let sc = v(vec![2], vec![1.0, 2.0]);
    let out = Reference
        .evaluate(
            &node("Resize", 19, &[("mode", Attr::String("cubic".into()))]),
            &[x.clone(), None, sc.clone()],
        )
        .unwrap();
    near(
        &out[0].value.data,
        &[
            0.89453125, 1.15625, 1.5625, 2.41796875, 3.16015625, 5.1171875, 7.1640625, 8.421875,
        ],
    );
    let n = node(
        "Resize",
        19,
        &[
            ("mode", Attr::String("cubic".into())),
            ("exclude_outside", Attr::Int(1)),
        ],
    );
    let out = Reference
        .evaluate(&n, &[x.clone(), None, sc.clone()])
        .unwrap();
    near(
        &out[0].value.data,
        &[
            0.86363637, 1.14134276, 1.54339623, 2.41796875, 3.16015625, 5.21509457, 7.24381638,
            8.54545498,
        ],
    );
    let n = node(
        "Resize",
        19,
        &[(
            "coordinate_transformation_mode",
            Attr::String("half_pixel_symmetric".into()),
        )],
    );
    let out = Reference.evaluate(&n, &[x.clone(), None, sc]).unwrap();
    assert_eq!(
        out[0].value.data,
        vec![1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 8.0, 8.0]
    );
    let n = node(
        "Resize",
        19,
        &[
            ("mode", Attr::String("linear".into())),
            (
                "coordinate_transformation_mode",
                Attr::String("tf_crop_and_resize".into()),
            ),
        ],
    );
    let roi = v(vec![4], vec![0.0, 0.2, 1.0, 0.9]);
    let out = Reference
        .evaluate(&n, &[x, roi, v(vec![2], vec![1.0, 1.5])])
        .unwrap();
    near(&out[0].value.data, &[1.6, 2.04, 2.88, 3.72, 5.12, 6.8]);
}

#[test]
fn cubic_at_node_is_exact() {
    // t = 0: weights [w(1), w(0), w(1), w(2)] = [0, 1, 0, 0] for any a.
    let c = super::cubic_coeffs(0.0, -0.75);
    assert_all_close(&c, &[0.0, 1.0, 0.0, 0.0]);
    // t = 0.5, a = -0.75: w(1.5) = ((a*1.5 - 5a)*1.5 + 8a)*1.5 - 4a = -0.09375, w(0.5) = 0.59375
    let c = super::cubic_coeffs(0.5, -0.75);
    assert_all_close(&c, &[-0.09375, 0.59375, 0.59375, -0.09375]);
}

#[test]
fn cubic_weights_sum_to_one_and_reproduce_linear() {
    let mut rng = SplitMix64(99);
    for _ in 0..8 {
        let t = rng.unit().abs();
        let c = super::cubic_coeffs(t, -0.75);
        assert!(close(c.iter().sum::<f64>(), 1.0));
        // With a = -0.5 Keys' kernel reproduces linear functions: sum c_k * (k - 1) = t.
        let c = super::cubic_coeffs(t, -0.5);
        let lin: f64 = c
            .iter()
            .enumerate()
            .map(|(k, w)| w * (k as f64 - 1.0))
            .sum();
        assert!(close(lin, t));
    }
}

#[test]
fn antialias_axes_and_aspect_policy_by_hand() {
    let x = v(vec![4], vec![1.0, 2.0, 3.0, 4.0]);
    let sc = v(vec![1], vec![0.5]);
    // Linear antialias at scale 1/2: the triangle stretched to radius 2. Output 0 sits at
    // x = 0.5: taps -1, 0, 1, 2 at distances 1.5, 0.5, 0.5, 1.5 -> weights 1/4, 3/4, 3/4, 1/4
    // (sum 2), index -1 clamped to 0: (1 + 3 + 6 + 3) / 8 = 1.625. Output 1 at 2.5: taps 1..4
    // on [2, 3, 4, 4]: (2 + 9 + 12 + 4) / 8 = 3.375.
    let aa = |extra: &[(&str, Attr)]| {
        let mut a = vec![
            ("mode", Attr::String("linear".into())),
            ("antialias", Attr::Int(1)),
        ];
        a.extend(extra.iter().cloned());
        Reference
            .evaluate(&node("Resize", 18, &a), &[x.clone(), None, sc.clone()])
            .unwrap()[0]
            .value
            .data
            .clone()
    };
    assert_all_close(&aa(&[]), &[1.625, 3.375]);
    // exclude_outside drops tap -1: (3/4 * 1 + 3/4 * 2 + 1/4 * 3) / (7/4) = 12/7.
    assert_all_close(
        &aa(&[("exclude_outside", Attr::Int(1))])[..1],
        &[12.0 / 7.0],
    );
    // Upsampling ignores antialias.
    let up = Reference
        .evaluate(
            &node(
                "Resize",
                18,
                &[
                    ("mode", Attr::String("linear".into())),
                    ("antialias", Attr::Int(1)),
                ],
            ),
            &[x.clone(), None, v(vec![1], vec![2.0])],
        )
        .unwrap();
    assert_all_close(
        &up[0].value.data,
        &[1.0, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4.0],
    );
    // axes [1]: only the last dimension is resized (nearest, asymmetric, scale 2).
    let x2 = v(vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let n = node(
        "Resize",
        18,
        &[
            ("axes", Attr::Ints(vec![-1])),
            (
                "coordinate_transformation_mode",
                Attr::String("asymmetric".into()),
            ),
        ],
    );
    let out = Reference
        .evaluate(&n, &[x2.clone(), None, v(vec![1], vec![2.0])])
        .unwrap();
    assert_eq!(out[0].value.shape, vec![2, 6]);
    assert_eq!(
        out[0].value.data,
        vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 5.0, 5.0, 6.0, 6.0]
    );
    // keep_aspect_ratio_policy on a [4, 2] input asked for [2, 2]: not_larger takes the smaller
    // ratio 1/2 for both axes -> [2, 1]; not_smaller the larger, 1 -> [4, 2].
    let x3 = v(vec![4, 2], vec![1.0; 8]);
    let sizes = Some(Value::new(DType::I64, vec![2], vec![2.0, 2.0]).unwrap());
    for (policy, want) in [("not_larger", vec![2, 1]), ("not_smaller", vec![4, 2])] {
        let n = node(
            "Resize",
            18,
            &[("keep_aspect_ratio_policy", Attr::String(policy.into()))],
        );
        let out = Reference
            .evaluate(&n, &[x3.clone(), None, None, sizes.clone()])
            .unwrap();
        assert_eq!(out[0].value.shape, want, "{policy}");
    }
}

#[test]
fn resize_10_against_its_own_test_data() {
    // onnx 1.5's Resize-10 cases: X [[1, 2], [3, 4]] nearest x(2, 3); X [[1..4], [5..8]] at 0.6
    // nearest and linear; X [[1, 2], [3, 4]] linear x2 (asymmetric, the last row and column
    // clamped).
    let up = v(vec![1, 1, 2, 2], vec![1.0, 2.0, 3.0, 4.0]);
    let down = v(vec![1, 1, 2, 4], (1..=8).map(f64::from).collect());
    let run = |mode: &str, x: &Option<Value>, scales: Vec<f64>| {
        let n = node("Resize", 10, &[("mode", Attr::String(mode.into()))]);
        let out = Reference
            .evaluate(&n, &[x.clone(), v(vec![4], scales)])
            .unwrap();
        (out[0].value.shape.clone(), out[0].value.data.clone())
    };
    let (shape, data) = run("nearest", &up, vec![1.0, 1.0, 2.0, 3.0]);
    assert_eq!(shape, vec![1, 1, 4, 6]);
    assert_eq!(
        data,
        [[1.0, 1.0, 1.0, 2.0, 2.0, 2.0]; 2]
            .concat()
            .into_iter()
            .chain([[3.0, 3.0, 3.0, 4.0, 4.0, 4.0]; 2].concat())
            .collect::<Vec<_>>()
    );
    assert_eq!(
        run("nearest", &down, vec![1.0, 1.0, 0.6, 0.6]),
        (vec![1, 1, 1, 2], vec![1.0, 3.0])
    );
    let (shape, data) = run("linear", &down, vec![1.0, 1.0, 0.6, 0.6]);
    assert_eq!(shape, vec![1, 1, 1, 2]);
    assert_all_close(&data, &[1.0, 1.0 + 1.0 / 0.6]);
    let (_, data) = run("linear", &up, vec![1.0, 1.0, 2.0, 2.0]);
    assert_all_close(
        &data,
        &[
            1.0, 1.5, 2.0, 2.0, 2.0, 2.5, 3.0, 3.0, 3.0, 3.5, 4.0, 4.0, 3.0, 3.5, 4.0, 4.0,
        ],
    );
    // Attributes of later opsets mean nothing to Resize-10, and cubic is not one of its modes.
    let n = node(
        "Resize",
        10,
        &[(
            "coordinate_transformation_mode",
            Attr::String("half_pixel".into()),
        )],
    );
    let out = Reference
        .evaluate(&n, &[down.clone(), v(vec![4], vec![1.0, 1.0, 0.6, 0.6])])
        .unwrap();
    assert_eq!(out[0].value.data, vec![1.0, 3.0]);
    let cubic = node("Resize", 10, &[("mode", Attr::String("cubic".into()))]);
    assert!(Reference.supports(&cubic).is_err());
    assert!(Reference.supports(&node("Resize", 9, &[])).is_err());
}

#[test]
fn tf_half_pixel_for_nn_by_hand() {
    let mut rng = SplitMix64(23);
    let xs = rng.vec(4);
    let x = v(vec![4], xs.clone());
    let ct = (
        "coordinate_transformation_mode",
        Attr::String("tf_half_pixel_for_nn".into()),
    );
    // Nearest x2: source (i + 0.5) / 2 = 0.25, 0.75, 1.25, ... round_prefer_floor -> 0, 1, 1,
    // 2, 2, 3, 3, 4 (clamped to 3).
    let out = Reference
        .evaluate(
            &node("Resize", 13, std::slice::from_ref(&ct)),
            &[x.clone(), None, v(vec![1], vec![2.0])],
        )
        .unwrap();
    let pick = |ix: &[usize]| ix.iter().map(|&i| xs[i]).collect::<Vec<_>>();
    assert_eq!(out[0].value.data, pick(&[0, 1, 1, 2, 2, 3, 3, 3]));
    // At scale 1 the source is i + 0.5, no identity: ceil reads the next element, linear the
    // mean of two neighbours.
    let n = node(
        "Resize",
        11,
        &[ct.clone(), ("nearest_mode", Attr::String("ceil".into()))],
    );
    let empty = v(vec![0], vec![]);
    let out = Reference
        .evaluate(&n, &[x.clone(), empty.clone(), v(vec![1], vec![1.0])])
        .unwrap();
    assert_eq!(out[0].value.data, pick(&[1, 2, 3, 3]));
    let n = node(
        "Resize",
        18,
        &[ct.clone(), ("mode", Attr::String("linear".into()))],
    );
    let out = Reference
        .evaluate(&n, &[x.clone(), None, v(vec![1], vec![1.0])])
        .unwrap();
    let want: Vec<f64> = (0..4).map(|i| 0.5 * (xs[i] + xs[(i + 1).min(3)])).collect();
    assert_all_close(&out[0].value.data, &want);
    // Axes left out of `axes` are not resized in any mode.
    let x2 = v(vec![2, 4], [xs.clone(), xs.clone()].concat());
    let n = node(
        "Resize",
        18,
        &[
            ct.clone(),
            ("nearest_mode", Attr::String("ceil".into())),
            ("axes", Attr::Ints(vec![1])),
        ],
    );
    let out = Reference
        .evaluate(&n, &[x2, None, v(vec![1], vec![1.0])])
        .unwrap();
    assert_eq!(
        out[0].value.data,
        [pick(&[1, 2, 3, 3]), pick(&[1, 2, 3, 3])].concat()
    );
    assert!(Reference.supports(&node("Resize", 19, &[ct])).is_err());
}
