/* kazeia CLI subcommands; each returns the process exit code. */
#ifndef KZ_CLI_H
#define KZ_CLI_H
int cmd_run(int argc, char **argv);      /* cli/cmd_run.c */
int cmd_info(int argc, char **argv);     /* cli/cmd_info.c */
int cmd_logits(int argc, char **argv);   /* cli/cmd_logits.c */
int cmd_tokenize(int argc, char **argv); /* cli/cmd_tokenize.c */
int cmd_bench(int argc, char **argv);    /* cli/cmd_bench.c */
int cmd_quantize(int argc, char **argv); /* cli/cmd_quantize.c */
int cmd_perplexity(int argc, char **argv); /* cli/cmd_perplexity.c */
int cmd_imatrix(int argc, char **argv);    /* cli/cmd_imatrix.c */
int cmd_bench_cascade(int argc, char **argv); /* cli/bench/cascade.c */
int cmd_guard(int argc, char **argv);         /* cli/cmd_guard.c */
int cmd_chat(int argc, char **argv);     /* cli/cmd_chat.c */
/* cli/default_model.c: the built-in default model (a base model: prompts are continued) */
#include "kazeia.h"
kz_model *cli_default_model(const kz_model_params *p, char *err, size_t errlen);
#endif
