/** SVG files are bundled as strings (the builder's asset/source rule). */
declare module '*.svg' {
  const value: string;
  export default value;
}
