//! Which layer's K/V lives where in the paged cache: page groups and slots.
//!
//! A *page* holds `slots` layers' K/V for one block of positions. A layer belongs to one
//! page *group*, and every group has its own block table per sequence: layer `l` reads and
//! writes page `tables[group(l)][pos / block_size]`, in the page's slot `slot(l)`.
//!
//! - `single`: one group of every layer (one page = one block of the whole model; the
//!   layout every model had before hybrid attention).
//! - `hybrid`: the full-attention layers form group 0 (one page per block), the window
//!   layers fill groups 1..=m in layer order, `slots` per group. The KV manager releases the
//!   window groups' pages behind the window (folio-core's `kv::window`), which is where a
//!   hybrid model's capacity comes from.
//!
//! ```text
//! Gemma 3 270M, window layers W, full layers F (every 6th):
//! layer:  0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17
//! kind:   W W W W W F W W W W W  F  W  W  W  W  W  F
//! group:  1 1 1 2 2 0 2 3 3 3 4  0  4  4  5  5  5  0     slots = 3, m = 5
//! slot:   0 1 2 0 1 0 2 0 1 2 0  1  1  2  0  1  2  2
//! ```

/// Placement of every layer's K/V in the paged cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvLayout {
    slots: usize,
    /// Per layer: (group, slot).
    place: Vec<(usize, usize)>,
    n_groups: usize,
}

impl KvLayout {
    /// Every layer in one group.
    pub fn single(n_layers: usize) -> Self {
        Self {
            slots: n_layers.max(1),
            place: (0..n_layers).map(|l| (0, l)).collect(),
            n_groups: 1,
        }
    }

    /// Full layers in group 0, window layers (`window[l]`) in groups of as many; `None`
    /// unless both kinds are present.
    pub fn hybrid(window: &[bool]) -> Option<Self> {
        let n_full = window.iter().filter(|&&w| !w).count();
        let n_window = window.len() - n_full;
        if n_full == 0 || n_window == 0 {
            return None;
        }
        let (mut full, mut win) = (0, 0);
        let place = window
            .iter()
            .map(|&w| {
                let at = if w {
                    (1 + win / n_full, win % n_full)
                } else {
                    (0, full)
                };
                if w {
                    win += 1;
                } else {
                    full += 1;
                }
                at
            })
            .collect();
        Some(Self {
            slots: n_full,
            place,
            n_groups: 1 + n_window.div_ceil(n_full),
        })
    }

    /// Layers per page.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Number of page groups (block tables per sequence).
    pub fn n_groups(&self) -> usize {
        self.n_groups
    }

    /// Window page groups (`n_groups − 1`): pages per block beside the full one.
    pub fn window_pages(&self) -> usize {
        self.n_groups - 1
    }

    /// Number of layers placed.
    pub fn n_layers(&self) -> usize {
        self.place.len()
    }

    /// The page group of layer `l`.
    pub fn group(&self, l: usize) -> usize {
        self.place[l].0
    }

    /// The slot of layer `l` within its pages.
    pub fn slot(&self, l: usize) -> usize {
        self.place[l].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemma3_270m_layout() {
        let window: Vec<bool> = (0..18).map(|l| (l + 1) % 6 != 0).collect();
        let k = KvLayout::hybrid(&window).unwrap();
        assert_eq!((k.slots(), k.n_groups(), k.window_pages()), (3, 6, 5));
        let groups: Vec<usize> = (0..18).map(|l| k.group(l)).collect();
        let slots: Vec<usize> = (0..18).map(|l| k.slot(l)).collect();
        assert_eq!(
            groups,
            [1, 1, 1, 2, 2, 0, 2, 3, 3, 3, 4, 0, 4, 4, 5, 5, 5, 0]
        );
        assert_eq!(
            slots,
            [0, 1, 2, 0, 1, 0, 2, 0, 1, 2, 0, 1, 1, 2, 0, 1, 2, 2]
        );
    }

    #[test]
    fn uneven_window_count_leaves_a_part_empty_page() {
        // Gemma 3 1B: 26 layers, full every 6th → 4 full, 22 window: 6 window pages of 4
        // slots (24 for 22 layers).
        let window: Vec<bool> = (0..26).map(|l| (l + 1) % 6 != 0).collect();
        let k = KvLayout::hybrid(&window).unwrap();
        assert_eq!((k.slots(), k.window_pages()), (4, 6));
        assert!(KvLayout::hybrid(&[true, true]).is_none());
        assert!(KvLayout::hybrid(&[false, false]).is_none());
        assert_eq!(KvLayout::single(3).n_groups(), 1);
    }
}
