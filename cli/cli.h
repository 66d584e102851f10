/* kazeia CLI subcommands; each returns the process exit code. */
#ifndef KZ_CLI_H
#define KZ_CLI_H
int cmd_run(int argc, char **argv);      /* cli/cmd_run.c */
int cmd_info(int argc, char **argv);     /* cli/cmd_info.c */
int cmd_logits(int argc, char **argv);   /* cli/cmd_logits.c */
int cmd_tokenize(int argc, char **argv); /* cli/cmd_tokenize.c */
int cmd_bench(int argc, char **argv);    /* cli/cmd_bench.c */
int cmd_chat(int argc, char **argv);     /* cli/cmd_chat.c */
#endif
