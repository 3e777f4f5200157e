/**
 * The layout of a checkpoint tree, drawn the way git graph views draw history.
 *
 * Pure data in, pure data out: no JupyterLab, no DOM. One row per checkpoint, newest
 * first, children always above their parents. Each row has a column (its lane) and the
 * line segments of its top half (lanes coming down from the row above, bending into the
 * node where the node is their parent) and of its bottom half (lanes going on down).
 * A node whose parent is not among the nodes (an older page not loaded yet, or the
 * checkpoint of another runtime a checkout started from) gets a dangling stub instead of
 * a lane, so the layout of any window of a large tree is correct for what it shows.
 *
 * The side panel draws it with `GraphCell`; a notebook widget can draw the same layout.
 */

/** What the layout needs of a checkpoint. */
export interface ITreeNode {
  id: string;
  parent: string | null;
  /** Creation time (ms); newer nodes are drawn higher. */
  time: number;
}

/** A line in one half of a row, from a column at one edge to a column at the other. */
export interface ISegment {
  from: number;
  to: number;
}

/** One drawn row. */
export interface ITreeRow {
  id: string;
  /** The column of the node. */
  column: number;
  /** Top half: from a column at the row's top edge to a column at its middle. */
  top: ISegment[];
  /** Bottom half: from a column at the row's middle to a column at its bottom edge. */
  bottom: ISegment[];
  /** The parent is set but not among the nodes: drawn as a stub below the node. */
  danglingParent: boolean;
  /** No child of this node is among the nodes (a branch tip). */
  tip: boolean;
}

/** The whole layout: rows in drawing order, and how many columns they need. */
export interface ITreeLayout {
  rows: ITreeRow[];
  columns: number;
  /** Row index of each node id. */
  index: Map<string, number>;
}

/**
 * The nodes newest first, every child before its parent.
 *
 * Newest first by time (ties: larger id first, so the order is stable); a child whose
 * clock said it was older than its parent (same millisecond, clock skew) is still
 * placed above the parent: a node is emitted only once all its children are.
 */
export function orderNewestFirst(nodes: readonly ITreeNode[]): ITreeNode[] {
  const byTime = [...nodes].sort(
    (a, b) => b.time - a.time || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0)
  );
  const present = new Set(byTime.map(n => n.id));
  const pendingChildren = new Map<string, number>();
  for (const node of byTime) {
    if (node.parent !== null && present.has(node.parent) && node.parent !== node.id) {
      pendingChildren.set(node.parent, (pendingChildren.get(node.parent) ?? 0) + 1);
    }
  }
  const ordered: ITreeNode[] = [];
  const emitted = new Set<string>();
  const waiting = new Set<string>();
  const byId = new Map(byTime.map(n => [n.id, n]));
  const emit = (node: ITreeNode): void => {
    // Emit the node, then each parent it was the last child of that was waiting for it.
    let current: ITreeNode | undefined = node;
    while (current !== undefined) {
      ordered.push(current);
      emitted.add(current.id);
      const parentId: string | null = current.parent;
      current = undefined;
      if (parentId === null || !pendingChildren.has(parentId) || emitted.has(parentId)) {
        continue;
      }
      const left = (pendingChildren.get(parentId) ?? 0) - 1;
      pendingChildren.set(parentId, left);
      if (left === 0 && waiting.has(parentId)) {
        waiting.delete(parentId);
        current = byId.get(parentId);
      }
    }
  };
  for (const node of byTime) {
    if (emitted.has(node.id)) {
      continue;
    }
    if ((pendingChildren.get(node.id) ?? 0) > 0) {
      waiting.add(node.id); // a child with an older timestamp comes first
      continue;
    }
    emit(node);
  }
  // A cycle (corrupt data) leaves nodes waiting: draw them rather than drop them.
  for (const node of byTime) {
    if (!emitted.has(node.id)) {
      ordered.push(node);
      emitted.add(node.id);
    }
  }
  return ordered;
}

/**
 * Lay out a tree (or a window of one): rows newest first, lanes like a git graph.
 *
 * Walking down the rows, each lane holds the id of the node it leads to. A node takes the
 * leftmost lane waiting for it (a new lane, leftmost free, when none does: a tip), and
 * other lanes waiting for it bend into it (the children of a fork). Its lane then waits
 * for its parent; a parent that is absent ends the lane in a stub.
 */
export function layoutTree(nodes: readonly ITreeNode[]): ITreeLayout {
  const ordered = orderNewestFirst(nodes);
  const present = new Set(ordered.map(n => n.id));
  const lanes: (string | null)[] = [];
  const rows: ITreeRow[] = [];
  const index = new Map<string, number>();
  let columns = 0;
  const alreadyPlaced = new Set<string>();

  for (const node of ordered) {
    const waiting: number[] = [];
    lanes.forEach((target, column) => {
      if (target === node.id) {
        waiting.push(column);
      }
    });
    let column: number;
    if (waiting.length > 0) {
      column = waiting[0];
    } else {
      const free = lanes.indexOf(null);
      column = free >= 0 ? free : lanes.length;
      if (column === lanes.length) {
        lanes.push(null);
      }
    }
    const top: ISegment[] = [];
    lanes.forEach((target, lane) => {
      if (target === null) {
        return;
      }
      top.push({ from: lane, to: target === node.id ? column : lane });
    });
    for (const lane of waiting) {
      lanes[lane] = null;
    }
    const parent = node.parent;
    const parentDrawn =
      parent !== null && parent !== node.id && present.has(parent) && !alreadyPlaced.has(parent);
    lanes[column] = parentDrawn ? parent : null;
    while (lanes.length > 0 && lanes[lanes.length - 1] === null) {
      lanes.pop();
    }
    const bottom: ISegment[] = [];
    lanes.forEach((target, lane) => {
      if (target !== null) {
        bottom.push({ from: lane, to: lane });
      }
    });
    columns = Math.max(columns, column + 1, lanes.length);
    index.set(node.id, rows.length);
    alreadyPlaced.add(node.id);
    rows.push({
      id: node.id,
      column,
      top,
      bottom,
      danglingParent: parent !== null && !parentDrawn,
      tip: waiting.length === 0
    });
  }
  return { rows, columns, index };
}
