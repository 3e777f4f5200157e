/** The ids of the panel's commands (each action is one, in the palette and menus). */
export const CommandIDs = {
  openPanel: 'ditto:open-panel',
  refresh: 'ditto:refresh',
  checkpoint: 'ditto:checkpoint',
  restore: 'ditto:restore',
  checkout: 'ditto:checkout',
  pause: 'ditto:pause',
  resume: 'ditto:resume',
  close: 'ditto:close',
  deleteSnapshot: 'ditto:delete-snapshot',
  pickForCompare: 'ditto:pick-for-compare',
  compare: 'ditto:compare',
  undoCell: 'ditto:undo-cell',
  showCellChanges: 'ditto:show-cell-changes',
  bringCellsBack: 'ditto:bring-cells-back',
  compareBranches: 'ditto:compare-branches',
  keepBranch: 'ditto:keep-branch',
  comparePicked: 'ditto:compare-picked'
} as const;
