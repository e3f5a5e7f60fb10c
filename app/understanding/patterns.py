r"""The rule tables: the 15 domains (docs/design.md#routing) and the code syntax behind
``has_code``.

One line per piece of a rule: ``group rule pattern``; the pieces of a rule are
concatenated in order (``|`` separates alternatives, as in any regex). Patterns are matched
against folded text (no accents, lower case), so they are written in lower case without
accents (``symptom\w*`` matches *symptôme* and *symptoms*); ``(?-i:...)`` makes a
part case-sensitive (``ROI``: in lower case it is the French word for king).
Patterns must not contain capturing groups, should start each alternative with
``\b``, a line start or a symbol (:mod:`~app.understanding.rules` explains why),
and the order matters twice: rules and alternatives are tried in the order
written, and the domains' order (the table below) is the tie-break.

Every domain's key patterns, in French and English:

========================  ============================================================
math                      calcul, équation, dérivée, matrice, probability, sqrt, \sum
coding                    code, function, class, def, python, API, debug, pytest, syntax
reasoning                 raisonne, explique pourquoi, step by step, chain of thought
image                     génère image, dessine, illustre, stable diffusion, dall-e
voice                     text to speech, synthèse vocale, voix, narration
transcription             transcrire, speech to text, whisper, dictée
translation               traduis, traduction, en anglais, en français, translate to
vision                    cette image, décris image, OCR, lire document
embedding                 embed, vectorise, similarity, semantic search, cosine
medical                   médical, diagnostic, symptôme, patient, maladie, IRM
finance                   financ, bourse, stock, trading, ROI, EBITDA
science                   physique, chimie, biologie, molécule, quantum
classification            classifie, catégorise, label, spam, toxic, detect
sentiment                 sentiment, opinion, positif négatif, satisfaction, avis
legal                     juridique, contrat, réglementation, RGPD, droit, tribunal
========================  ============================================================
"""

from __future__ import annotations

#: Code syntax, not keywords. Each occurrence is one ``coding`` match and sets ``has_code``.
CODE_SYNTAX_TABLE = r"""
code fence      ```
code def        (?m:^[ \t]*(?:async[ \t]+)?def[ \t]+\w+[ \t]*\()
code class      (?m:^[ \t]*class[ \t]+\w+[ \t]*(?:\([^)\n]*\))?[ \t]*[:{])
code function   \bfunction\b[ \t]*\w*[ \t]*\([^)\n]*\)[ \t]*\{
code binding    (?m:^[ \t]*(?:const|let|var)[ \t]+\w+[ \t]*=)
code arrow      \)[ \t]*=>
code import     (?m:^[ \t]*from[ \t]+[\w.]+[ \t]+import[ \t]+\w)
code import     |(?m:^[ \t]*import[ \t]+[\w.]+(?:[ \t]+as[ \t]+\w+)?[ \t]*;?[ \t]*$)
code include    \#include[ \t]*[<"]
code call       \bconsole\.log[ \t]*\(|\bsystem\.out\.print
code java       (?-i:\bpublic[ \t]+(?:static[ \t]+)?(?:void|class|int|String)\b)
code sql        (?-i:\bSELECT\b[^\n;]{1,200}?\bFROM\b)
code html       </?(?:div|span|html|body|script|button|table|ul|li)\b[^<>\n]*>
code traceback  \btraceback \(most recent call last\)
code block      (?m:^[ \t]*(?:if|for|while)[ \t]*\([^)\n]*\)[ \t]*\{)
"""

DOMAIN_TABLE = r"""
math            latex           \\(?:sum|int|frac|sqrt|prod|lim)\b
math            calculation     \bcalcul\w*
math            equation        \bequations?\b
math            derivative      \bderiv(?:ee|ees|er|ative|atives)\b
math            matrix          \bmatri(?:ce|ces|x|xes)\b
math            probability     \bprobabilit(?:y|ies|e|es)\b
math            sqrt            \bsqrt\b|√|\bsquare\s+root\b|\bracine\s+carree\b
math            integral        \bintegra(?:l|ls|le|les)\b
math            algebra         \btheore(?:m|ms|me|mes)\b|\balgebr\w*|\bpolynom\w*
math            mathematics     \bmath(?:s|ematics|ematique|ematiques|ematical)?\b
math            solve           \bsolve\s+for\b|\bresou(?:s|dre)\b
math            arithmetic      \d\s*[+*^×÷]\s*\d|\d\s+[-/]\s+\d

coding          code            \bcod(?:e|es|er|ing)\b
coding          function        \bf[ou]nctions?\b
coding          class           \bclass(?:e|es)?\b
coding          def             \bdef\b
coding          python          \bpython\b
coding          language        \b(?:javascript|typescript|java|golang|rust|kotlin|php|ruby)\b
coding          language        |\b(?:scala|bash|sql|html|css|react|django|flask|fastapi)\b
coding          language        |\bnode\.?js\b|\bc(?:\+\+|\#)(?!\w)
coding          api             \bapis?\b
coding          debug           \bdebug\w*|\bdebog\w*
coding          pytest          \bpytest\b|\bunit\s*tests?\b|\btests?\s+unitaires?\b
coding          bug             \bbugs?\b|\bstack\s*trace\b|\btraceback\b|\bcompil\w*
coding          programming     \bprogramm(?:ing|er|ers|ation|e|es)\b|\bscripts?\b|\brefactor\w*

reasoning       chain_of_thought \bchain[- ]of[- ]thoughts?\b|\bchaine\s+de\s+pensees?\b
reasoning       reason          \braisonn\w*|\breasoning\b|\breason\s+(?:through|about)\b
reasoning       explain_why     \bexpli(?:que|quez|quer)(?:[- ](?:moi|nous))?\s+pourquoi\b
reasoning       explain_why     |\bexplain\s+(?:to\s+me\s+)?why\b
reasoning       step_by_step    \bstep[- ]by[- ]step\b|\betape\s+par\s+etape\b
reasoning       logic           \bdedu(?:ce|ire|is|it|ction|ctions)\b|\b(?:riddle|enigme)s?\b
reasoning       logic           |\b(?:logic|logique)\s+(?:puzzle|problem|probleme)s?\b
reasoning       logic           |\bthink\s+(?:carefully|hard|it\s+through)\b

image           generate        \b(?:gener(?:e|es|ez|er|ate|ating)|cre(?:e|es|ez|er|ate)|make
image           generate        |fai(?:s|tes)|produi\w*|render)(?:[- ](?:moi|me|nous|us))?\s+
image           generate        (?:(?:me|us)\s+)?(?:(?:une?|an?|the|des|la|le|les|some|l')\s*)?
image           generate        (?:[a-z]+\s+)?(?:image|picture|photo|illustration|logo|drawing
image           generate        |painting|portrait|wallpaper|icone|icon|dessin)s?\b
image           draw            \bdessin(?:e|es|ez|er)\b
image           draw            |\bdraw(?:s|ing)?\s+(?:me\s+|us\s+)?(?:an?|the)\b
image           illustrate      \billustr(?:e|es|ez|er|ate)\b
image           model           \bstable[- ]?diffusion\b|\bmidjourney\b|\bsdxl\b
image           model           |\bdall[-·]e(?:[- ]?[23])?\b|\bdalle[- ]?[23]\b
image           text_to_image   \btext[- ]to[- ]image\b|\bimage\s+generation\b
image           text_to_image   |\bgeneration\s+d'images?\b

voice           tts             \btext[- ]to[- ]speech\b|\btts\b|\bspeech\s+synthesis\b
voice           synthesis       \bsynthese\s+(?:vocale|de\s+(?:la\s+)?parole)\b
voice           aloud           \b(?:read|say|speak)\s+(?:it\s+|this\s+)?(?:aloud|out\s+loud)\b
voice           aloud           |\ba\s+voix\s+haute\b
voice           voice           \bvoix\b|\bvoice(?:[- ]?over)?s?\b
voice           narration       \bnarrat(?:ion|ions|e|eur|rice|or)\b
voice           audiobook       \blivres?\s+audio\b|\baudio\s?books?\b

transcription   transcribe      \btranscri\w*
transcription   speech_to_text  \bspeech[- ]to[- ]text\b|\bstt\b|\bspeech\s+recognition\b
transcription   speech_to_text  |\breconnaissance\s+(?:vocale|de\s+la\s+parole)\b
transcription   whisper         \bwhisper\b
transcription   dictation       \bdict(?:ee|ees|ation|ate|er)\b
transcription   subtitles       \bsous[- ]titr\w*|\bsubtitl\w*

translation     translate       \btradui\w*|\btraductions?\b|\btranslat\w*
translation     into_language   \b(?:en\s+|vers\s+l'\s*|vers\s+le\s+|(?:in)?to\s+)
translation     into_language   (?:anglais|francais|espagnol|allemand|italien|portugais|chinois
translation     into_language   |japonais|arabe|russe|neerlandais|english|french|spanish|german
translation     into_language   |italian|portuguese|chinese|japanese|arabic|russian|dutch)\b
translation     version         \bversion\s+(?:anglaise|francaise|espagnole|allemande|italienne)\b

vision          what_is_in      \bwhat(?:'s|\s+is|\s+do\s+you\s+see)\s+(?:in|on)\s+(?:this|the)\s+
vision          what_is_in      (?:image|picture|photo)\b
vision          what_is_in      |\bqu'y\s+a-t-il\s+(?:sur|dans)\s+(?:cette|l')\s*(?:image|photo)\b
vision          describe_image  \b(?:decri(?:s|re|vez)|describe)(?:-moi)?\s+(?:(?:cette|cet|l'|la
vision          describe_image  |les|une?|this|the|an?)\s*)?(?:images?|photos?|pictures?
vision          describe_image  |screenshots?|captures?)\b
vision          this_image      \b(?:cette|ces)\s+(?:images?|photos?|captures?\s+d'ecran|figures?
vision          this_image      |schemas?)\b
vision          this_image      |\b(?:this|these|attached|uploaded)\s+(?:images?|photos?|pictures?
vision          this_image      |screenshots?|figures?|diagrams?|scans?)\b
vision          this_image      |\b(?:image|photo)\s+(?:ci-)?jointe\b
vision          ocr             \bocr\b|\breconnaissance\s+(?:optique\s+)?de\s+caracteres\b
vision          ocr             |\boptical\s+character\s+recognition\b
vision          read_document   \b(?:lire|lis|lisez|read)\s+(?:(?:le|ce|cette|les|un|une|the|this
vision          read_document   |a)\s+)?(?:documents?|scans?|factures?|invoices?|receipts?|pdf)\b

embedding       embed           \bembed\w*|\bplongements?\b
embedding       vectorise       \bvectori[sz]\w*|\bvector\s+(?:store|database|db|index)\b
embedding       cosine          \bcosine\b|\b(?:similarite|distance)\s+cosinus\b
embedding       similarity      \bsimilarit(?:y|ies|e|es)\b
embedding       semantic_search \bsemantic\s+search\b|\brecherche\s+semantique\b
embedding       neighbours      \bnearest\s+neighbou?rs?\b|\bplus\s+proches\s+voisins\b

medical         medical         \bmedic(?:al|ale|aux|ales|ine|ines|ament|aments|ation|ations)\b
medical         medical         |\bmedecin\w*
medical         diagnosis       \bdiagnos\w*
medical         symptom         \bsymptom\w*
medical         patient         \bpatient(?:e|s|es)?\b
medical         disease         \bmaladies?\b|\bdiseases?\b|\billness(?:es)?\b|\bpatholog\w*
medical         disease         |\bcancers?\b|\bdiabete?s?\b
medical         imaging         \birm\b|\bmri\b|\bradiograph\w*|\bx-?rays?\b
medical         clinical        \bclini(?:c|cs|cal|que|ques|cien|ciens|cian|cians)\b
medical         clinical        |\bhopita(?:l|ux)\b|\bhospital\w*|\bdoctors?\b|\bposologie\b
medical         clinical        |\bdosage\b|\b(?:fievre|fever)\b

finance         roi             (?-i:\bROI\b)|\breturn\s+on\s+investment\b
finance         roi             |\bretour\s+sur\s+investissement\b
finance         finance         \bfinanc\w*
finance         bourse          \bbourses?\b|\bboursi\w*
finance         stock           \bstocks?\b|\bshare\s+price\b
finance         trading         \btrad(?:ing|er|ers)\b
finance         ebitda          \bebitda\b|\bcash[- ]?flows?\b|\btresorerie\b|\bcomptab\w*
finance         ebitda          |\baccounting\b|\bchiffre\s+d'affaires\b|\bbalance\s+sheet\b
finance         investment      \binvest\w*|\bportefeuilles?\b|\bportfolios?\b|\bdividend\w*
finance         investment      |\bcrypto\w*|\bbitcoin\w*|\binterest\s+rates?\b|\binflation\b
finance         investment      |\btaux\s+d'interet\b

science         physics         \bphysi(?:que|ques|cs|cien|ciens|cist|cists)\b
science         chemistry       \bchimi\w*|\bchemi(?:stry|cal|cals|st|sts)\b
science         biology         \bbiolog\w*
science         molecule        \bmolecul\w*
science         quantum         \bquantum\b|\bquanti(?:que|ques)\b
science         other           \batom(?:e|es|s|ique|iques)?\b|\bprotein(?:e|es|s)?\b
science         other           |\b(?:adn|dna|arn|rna)\b|\bgen(?:etique|etics|omes?)\b
science         other           |\bastro(?:nom|phys)\w*|\bthermodynami\w*|\bphotosynth\w*
science         other           |\b(?:electron|proton|neutron|photon)s?\b|\bentrop(?:y|ie)\b
science         other           |\brelativit\w*|\bscientifi\w*

classification  classify        \bclassif\w*
classification  categorise      \bcategori[sz]\w*
classification  label           \blabel\w*|\betiquet\w*
classification  spam            \bspam\w*|\bphishing\b|\bhameconnage\b
classification  toxic           \btoxi(?:c|que|ques|city|cite)\b|\bhate\s+speech\b
classification  toxic           |\bdiscours\s+haineux\b
classification  detect          \bdetect\w*

sentiment       sentiment       \bsentiments?\b
sentiment       opinion         \bopinions?\b
sentiment       polarity        \bpositi(?:f|fs|ve|ves)\b[\s,/]*(?:(?:ou|or|et|and)\s+)?(?:\w+\s+)?
sentiment       polarity        negati(?:f|fs|ve|ves)\b
sentiment       polarity        |\bpolarit\w*
sentiment       satisfaction    \bsatisf\w*|\binsatisf\w*|\bdissatisf\w*|\bmecontent\w*
sentiment       review          \bavis\b|\b(?:customer|product|user)\s+(?:reviews?|feedback)\b
sentiment       review          |\bemotion\w*

legal           juridique       \bjuridi\w*|\b(?:il)?legal\w*|\blegislat\w*|\bavocats?\b
legal           juridique       |\blaw(?:s|yer|yers|suit|suits)?\b
legal           contract        \bcontra(?:t|ts|ct|cts|ctual|ctuel|ctuelle|ctuels|ctuelles)\b
legal           regulation      \breglement\w*|\bregulat\w*|\bcompliance\b|\bconformite\b
legal           gdpr            \b(?:rgpd|gdpr|ccpa)\b
legal           droit           \bdroits?\b|\blois?\b
legal           tribunal        \btribuna(?:l|ux)\b|\bjurisprudence\b|\bcase\s+law\b|\blitig\w*
legal           tribunal        |\bproces\b|\bcour\s+(?:de\s+cassation|d'appel|supreme)\b
legal           clause          \bclauses?\b|\bliabilit\w*|\bterms\s+of\s+(?:service|use)\b
legal           clause          |\bconditions\s+generales\b
"""
