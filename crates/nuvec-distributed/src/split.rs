//! What the ring's and JACCL's `Group::split` share: checking a color, a negative key's
//! meaning, and the order of a sub-group's members.

/// The key a rank splits with: its own, or its rank in the parent when negative (which keeps
/// the parent's order); an error for a negative color.
pub(crate) fn color_and_key(rank: usize, (color, key): (i32, i32)) -> Result<(i32, i32), String> {
    if color < 0 {
        return Err(format!("the color must be 0 or more, got {color}"));
    }
    Ok((color, if key < 0 { rank as i32 } else { key }))
}

/// The members of the sub-group of `color` among every parent rank's `(color, key)`, in the
/// sub-group's order: by key, then by parent rank.
pub(crate) fn members(colors: &[(i32, i32)], color: i32) -> Vec<usize> {
    let mut members: Vec<usize> = (0..colors.len())
        .filter(|&r| colors[r].0 == color)
        .collect();
    members.sort_by_key(|&r| (colors[r].1, r));
    members
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_follow_key_then_rank_and_negative_keys_keep_the_parent_order() {
        let colors = [(0, 5), (1, 0), (0, 1), (0, 5), (1, 9)];
        assert_eq!(members(&colors, 0), [2, 0, 3]);
        assert_eq!(members(&colors, 1), [1, 4]);
        assert_eq!(color_and_key(3, (2, -1)), Ok((2, 3)));
        assert_eq!(color_and_key(3, (2, 7)), Ok((2, 7)));
        assert!(color_and_key(0, (-3, 0)).unwrap_err().contains("-3"));
    }
}
