/** The panel's icons (themed through JupyterLab's `jp-icon3` class). */

import { LabIcon } from '@jupyterlab/ui-components';

import checkpointSvg from '../style/icons/checkpoint.svg';
import runtimesSvg from '../style/icons/runtimes.svg';

export const runtimesIcon = new LabIcon({ name: 'ditto-jupyter:runtimes', svgstr: runtimesSvg });

export const checkpointIcon = new LabIcon({
  name: 'ditto-jupyter:checkpoint',
  svgstr: checkpointSvg
});
