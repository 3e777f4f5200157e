/** The panel's icons (themed through JupyterLab's `jp-icon3` class). */

import { LabIcon } from '@jupyterlab/ui-components';

import checkpointSvg from '../style/icons/checkpoint.svg';
import runtimesSvg from '../style/icons/runtimes.svg';
import undoCellSvg from '../style/icons/undo-cell.svg';

export const runtimesIcon = new LabIcon({ name: 'ditto-jupyter:runtimes', svgstr: runtimesSvg });

export const checkpointIcon = new LabIcon({
  name: 'ditto-jupyter:checkpoint',
  svgstr: checkpointSvg
});

/** Undo the last cell in the runtime: a step back over a cell. */
export const undoCellIcon = new LabIcon({ name: 'ditto-jupyter:undo-cell', svgstr: undoCellSvg });
