/**
 * The CheckpointTree widget's rows: automatic checkpoints (one per cell run, from
 * %autocheckpoint) folded into compact timelines, everything else one row per checkpoint.
 *
 * Pure data in, pure data out. A run of automatic checkpoints, each the only child of the
 * one before in the same runtime, becomes one entry; the entry takes the id of its newest
 * checkpoint, so the tree layout (`src/tree/layout`) lays entries out as it lays out
 * checkpoints, and a fork or a checkout ends a run where it happens.
 */

import { ITreeNode } from '../tree/layout';

/** The cell an automatic checkpoint was taken after. */
export interface IAutoCell {
  execution_count: number | null;
  failed: boolean;
  source: string;
}

/** One checkpoint as the kernel side syncs it (ditto_jupyter/widgets/checkpoint_tree.py). */
export interface IWidgetNode {
  id: string;
  parent: string | null;
  runtime_id: string;
  name: string | null;
  time: number;
  auto: IAutoCell | null;
  unrestorable: string[];
}

/** A checkout made from a checkpoint of the tree. */
export interface IWidgetBranch {
  runtime_id: string;
  checkpoint_id: string;
  conversation_id: string;
  status: string;
}

/** One row of the widget: a checkpoint, or a timeline of automatic ones. */
export interface ITimelineEntry extends ITreeNode {
  /** The checkpoints of the row, oldest first (one, unless a timeline). */
  nodes: IWidgetNode[];
  /** Automatic checkpoints: drawn as a timeline of cells. */
  timeline: boolean;
}

/**
 * Fold runs of automatic checkpoints into entries.
 *
 * @param nodes - the checkpoints, in any order
 * @param ends - checkpoints that end a run (checkouts were made from them)
 */
export function foldTimelines(
  nodes: readonly IWidgetNode[],
  ends: ReadonlySet<string> = new Set()
): ITimelineEntry[] {
  const byId = new Map(nodes.map(n => [n.id, n]));
  const children = new Map<string, number>();
  for (const node of nodes) {
    if (node.parent !== null && byId.has(node.parent)) {
      children.set(node.parent, (children.get(node.parent) ?? 0) + 1);
    }
  }
  const joinsParent = (node: IWidgetNode): IWidgetNode | null => {
    const parent = node.parent !== null ? byId.get(node.parent) : undefined;
    if (
      parent === undefined ||
      parent.id === node.id ||
      node.auto === null ||
      parent.auto === null ||
      parent.runtime_id !== node.runtime_id ||
      children.get(parent.id) !== 1 ||
      ends.has(parent.id)
    ) {
      return null;
    }
    return parent;
  };
  const runOf = new Map<string, IWidgetNode[]>();
  for (const start of nodes) {
    // Walk up to the first node with a run (or the run's start), then assign on the way down.
    const chain: IWidgetNode[] = [];
    const inChain = new Set<string>();
    let current: IWidgetNode | null = start;
    while (current !== null && !runOf.has(current.id) && !inChain.has(current.id)) {
      chain.push(current);
      inChain.add(current.id);
      current = joinsParent(current);
    }
    if (current !== null && !runOf.has(current.id)) {
      current = null; // a cycle (corrupt data): start a run rather than loop
    }
    let run = current !== null ? runOf.get(current.id) : undefined;
    for (const node of chain.reverse()) {
      if (run === undefined || joinsParent(node) === null) {
        run = [];
      }
      run.push(node);
      runOf.set(node.id, run);
    }
  }
  const entries: ITimelineEntry[] = [];
  const seen = new Set<IWidgetNode[]>();
  for (const run of runOf.values()) {
    if (seen.has(run)) {
      continue;
    }
    seen.add(run);
    const newest = run[run.length - 1];
    entries.push({
      id: newest.id,
      parent: run[0].parent,
      time: newest.time,
      nodes: run,
      timeline: run[0].auto !== null
    });
  }
  return entries;
}

/** A label for a timeline: "cells 3-9 (2 failed)". */
export function timelineLabel(nodes: readonly IWidgetNode[]): string {
  const counts = nodes
    .map(n => n.auto?.execution_count)
    .filter((c): c is number => typeof c === 'number');
  const failed = nodes.filter(n => n.auto?.failed).length;
  const span =
    counts.length === 0
      ? `${nodes.length} cells`
      : counts.length === 1
        ? `cell ${counts[0]}`
        : `cells ${Math.min(...counts)}-${Math.max(...counts)}`;
  return failed > 0 ? `${span} (${failed} failed)` : span;
}
