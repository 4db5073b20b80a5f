// The config file's name, apart from its schema (zod) so that the commands' help can name it without loading that.
export const CONFIG_FILE_NAME = 'devop.json';
