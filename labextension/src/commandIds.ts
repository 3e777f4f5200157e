/** The ids of the panel's commands (each action is one, in the palette and menus). */
export namespace CommandIDs {
  export const openPanel = 'ditto:open-panel';
  export const refresh = 'ditto:refresh';
  export const checkpoint = 'ditto:checkpoint';
  export const restore = 'ditto:restore';
  export const checkout = 'ditto:checkout';
  export const pause = 'ditto:pause';
  export const resume = 'ditto:resume';
  export const close = 'ditto:close';
  export const deleteSnapshot = 'ditto:delete-snapshot';
}
